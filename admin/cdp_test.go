package admin_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// browser drives headless Chromium over the DevTools protocol: one page,
// commands sent on the browser's websocket with the page's session id.
type browser struct {
	t       *testing.T
	conn    *websocket.Conn
	session string
	next    atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan cdpMessage
}

type cdpMessage struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params any             `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
}

// chromiumPath finds the browser. CI installs Debian's chromium; a missing
// browser fails the test, so the UI is never silently untested.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("HALTLINE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium not found: install it (Debian: apt-get install -y chromium) or set HALTLINE_CHROMIUM")
	return ""
}

// launchChromium starts a headless Chromium with a fresh profile, stopped
// with the test, and returns a context that ends with it and its DevTools
// address; false when it printed none within 30 s (it is then stopped).
func launchChromium(t *testing.T) (context.Context, string, bool) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, chromiumPath(t),
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), "--remote-debugging-port=0",
		"--window-size=1280,900", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	stop := func() {
		cancel()
		_ = cmd.Wait()
	}
	wsURL := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
				wsURL <- strings.TrimSpace(u)
			}
		}
	}()
	select {
	case u := <-wsURL:
		t.Cleanup(stop)
		return ctx, u, true
	case <-time.After(30 * time.Second):
		stop()
		return nil, "", false
	}
}

// startBrowser launches Chromium with a fresh profile and opens one page.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	var ctx context.Context
	var u string
	// A Chromium that never printed its DevTools address (seen once on a
	// loaded CI machine; it prints it in 0.3–0.6 s) is started once more
	// with a new profile.
	for attempt := 1; ; attempt++ {
		var ok bool
		if ctx, u, ok = launchChromium(t); ok {
			break
		}
		if attempt == 2 {
			t.Fatal("chromium did not print its DevTools address within 30 s, twice")
		}
		t.Log("chromium did not print its DevTools address within 30 s: starting it again")
	}
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("DevTools websocket: %v", err)
	}
	conn.SetReadLimit(64 << 20) // screenshots
	b := &browser{t: t, conn: conn, pending: map[int64]chan cdpMessage{}}
	go b.read(ctx)
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.do("Page.enable", nil, nil)
	b.do("Runtime.enable", nil, nil)
	b.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) read(ctx context.Context) {
	for {
		_, data, err := b.conn.Read(ctx)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil || m.ID == 0 {
			continue // events are not needed: the test polls the page
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// call sends one command and decodes its result into out.
func (b *browser) call(session, method string, params, out any) {
	b.t.Helper()
	id := b.next.Add(1)
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.pending[id] = ch
	b.mu.Unlock()
	msg, _ := json.Marshal(cdpMessage{ID: id, Method: method, Params: params, SessionID: session})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			b.t.Fatalf("%s: DevTools connection closed", method)
		}
		if m.Error != nil {
			b.t.Fatalf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-ctx.Done():
		b.t.Fatalf("%s: no answer in 30 s", method)
	}
}

func (b *browser) do(method string, params, out any) {
	b.t.Helper()
	b.call(b.session, method, params, out)
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	b.do("Page.navigate", map[string]any{"url": url}, nil)
}

// eval runs a JS expression in the page and returns its value as JSON.
func (b *browser) eval(expr string) json.RawMessage {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.do("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		return nil
	}
	return r.Result.Value
}

// waitFor polls expr until it is true.
func (b *browser) waitFor(desc, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if v := b.eval(expr); string(v) == "true" {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s: %s stayed false; page: %s", desc, expr, b.eval("document.body && document.body.innerText"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) text(selector string) string {
	b.t.Helper()
	var s string
	_ = json.Unmarshal(b.eval(fmt.Sprintf("(document.querySelector(%q)||{}).textContent||''", selector)), &s)
	return s
}

func (b *browser) screenshot() []byte {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.do("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}
