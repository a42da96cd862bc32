package admin

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// The control plane is reached by browsers (its UI) on a machine where any
// other page may be open. Without a token, nothing but these checks stands
// between a hostile page and cancelling runs or approving L2 tool calls:
//
//   - Host names this control plane (DNS rebinding: a page whose own name
//     resolves to the listener reads and writes as if same-origin);
//   - Origin, when a browser sends one, is this control plane's;
//   - writes carry Content-Type: application/json, which a page can only
//     send cross-origin after a CORS preflight this server never grants.

// guard holds what the Host and Origin checks accept.
type guard struct {
	hosts   []string // lower case, "name" (any port) or "name:port"
	origins []string // lower case scheme://host[:port], own and configured
}

func newGuard(o Options) *guard {
	g := &guard{}
	for _, h := range o.AllowedHosts {
		g.hosts = append(g.hosts, strings.ToLower(strings.TrimSpace(h)))
	}
	for _, s := range o.AllowedOrigins {
		g.origins = append(g.origins, normOrigin(s))
	}
	host, port, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return g
	}
	g.origins = append(g.origins, "http://"+strings.ToLower(net.JoinHostPort(host, port)))
	// Listening on loopback or on every address, the control plane is also
	// itself under each loopback name at the same port.
	if ip, err := netip.ParseAddr(host); err == nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		for _, lo := range []string{"localhost", "127.0.0.1", "::1"} {
			g.origins = append(g.origins, "http://"+net.JoinHostPort(lo, port))
		}
	}
	return g
}

func normOrigin(s string) string {
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(s), "/"))
}

// hostExempt are the routes a Host check would break without protecting
// anything: probes and scrapers address the pod by whatever their discovery
// gives (pod IP, Service name, compose service name), and the answers are
// status words and aggregate counters, nothing that names a run or acts.
var hostExempt = []string{"/healthz", "/readyz", "/metrics"}

// hostOK accepts an IP literal, localhost, and the configured names. A
// browser sets Host from the URL it loads, so DNS rebinding always arrives
// under the attacker's own DNS name: an IP literal or localhost cannot be
// rebound. The port is not compared: port-forwards and container port maps
// reach the listener under another port, and the port plays no part in
// rebinding.
func (g *guard) hostOK(hostport string) bool {
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil || host == "localhost" {
		return true
	}
	return slices.Contains(g.hosts, host) || slices.Contains(g.hosts, hostport)
}

// originOK accepts a request without Origin (not a browser, or a same-origin
// GET), an origin naming the Host the request came in on (same-origin; Host
// is checked first), and the control plane's own and configured origins.
func (g *guard) originOK(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" among them: sandboxed frames, file: pages
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	return slices.Contains(g.origins, normOrigin(o))
}

// wrap refuses a foreign Host or Origin with 403 before any route runs.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(hostExempt, r.URL.Path) && !g.hostOK(r.Host) {
			writeError(w, http.StatusForbidden, "host "+r.Host+" is not this control plane's: add it to admin.allowed_hosts")
			return
		}
		if !g.originOK(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused: add the origin to admin.allowed_origins")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireJSON answers 415 unless the body is declared JSON; a bodiless write
// (cancel) declares it too. A page can send text/plain, form or multipart
// bodies cross-origin without asking, never application/json.
func requireJSON(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "Content-Type: application/json required")
			return
		}
		h(w, r)
	}
}

// routes registers handlers by method and path and answers a known path
// asked with another method 405 with Allow, in JSON like every answer.
type routes struct {
	mux   *http.ServeMux
	allow map[string][]string // path → methods, in registration order
	order []string
}

func newRoutes() *routes {
	return &routes{mux: http.NewServeMux(), allow: map[string][]string{}}
}

// handle registers h for method and path; writes must declare JSON.
func (rt *routes) handle(method, path string, h http.HandlerFunc) {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		h = requireJSON(h)
	}
	rt.mux.Handle(method+" "+path, h)
	if _, ok := rt.allow[path]; !ok {
		rt.order = append(rt.order, path)
	}
	rt.allow[path] = append(rt.allow[path], method)
	if method == http.MethodGet {
		rt.allow[path] = append(rt.allow[path], http.MethodHead) // a GET pattern serves HEAD
	}
}

// methodNotAllowed registers, for every path, the 405 for the methods it
// lacks; wrap puts it behind what guards the path's routes (the token).
func (rt *routes) methodNotAllowed(wrap func(path string, h http.HandlerFunc) http.HandlerFunc) {
	for _, path := range rt.order {
		allow := strings.Join(rt.allow[path], ", ")
		rt.mux.Handle(path, wrap(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed: "+allow)
		}))
	}
}
