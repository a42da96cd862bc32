package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// uiFiles are the web page's static assets: plain HTML, CSS and JS, no CDN,
// so the page works on an air-gapped cluster. They hold no data; the page
// reads everything from /api/v1 with the operator's bearer token, which is
// why the files themselves are served without auth.
//
//go:embed ui
var uiFiles embed.FS

// uiHandler serves /ui/.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page is a console: never framed by another origin, no
		// script but its own.
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
