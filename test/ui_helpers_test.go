package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// The dashboard's browser tests drive a real headless Chromium, from
// Debian's chromium package, through the DevTools protocol (chromedp),
// against the real server binary.

// uiArtifactsEnv names the directory that receives the browser tests'
// screenshots; without it they go to a temporary directory.
const uiArtifactsEnv = "REZUSCLOUD_UI_ARTIFACTS"

// uiChromium is the Chromium binary, found (or installed) once per test
// binary by scripts/chromium.sh.
var uiChromium struct {
	once sync.Once
	path string
	why  string // why there is none
}

// chromiumPath returns the Chromium binary, installing Debian's package
// when it is missing. A test skips, saying why, only when Chromium cannot
// be installed on this machine.
func chromiumPath(t *testing.T) string {
	t.Helper()
	uiChromium.once.Do(func() {
		cmd := exec.Command("bash", filepath.Join(testenv.Root(), "scripts", "chromium.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		lines := strings.Fields(string(out))
		var exit *exec.ExitError
		switch {
		case err == nil && len(lines) > 0:
			uiChromium.path = lines[len(lines)-1]
		case errors.As(err, &exit) && exit.ExitCode() == 3:
			uiChromium.why = strings.TrimSpace(stderr.String())
		default:
			uiChromium.why = fmt.Sprintf("scripts/chromium.sh failed (%v): %s", err, strings.TrimSpace(stderr.String()))
		}
	})
	if uiChromium.path == "" {
		if strings.HasPrefix(uiChromium.why, "scripts/chromium.sh failed") {
			t.Fatal(uiChromium.why)
		}
		t.Skipf("no Chromium for the browser tests: %s", uiChromium.why)
	}
	return uiChromium.path
}

// browser is one headless Chromium with one tab, open on a server. It
// records every request the pages make and every console message.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base *url.URL // the server
	dir  string   // screenshots

	mu       sync.Mutex
	requests []string
	console  []chromedp.ConsoleMessage
	loaded   float64 // bytes of the responses that finished loading
}

func newBrowser(t *testing.T, serverURL string) *browser {
	t.Helper()
	exe := chromiumPath(t)
	base, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	// The flags that Chromium needs on these machines (DESIGN.md): the
	// closed network refuses the connections of its background services.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx, base: base, dir: uiArtifacts(t)}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", exe, err)
	}
	err = chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.mu.Lock()
			b.requests = append(b.requests, e.Request.URL)
			b.mu.Unlock()
		case *network.EventLoadingFinished:
			b.mu.Lock()
			b.loaded += e.EncodedDataLength
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// uiArtifacts returns the directory for the test's screenshots.
func uiArtifacts(t *testing.T) string {
	dir := os.Getenv(uiArtifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else {
		dir = filepath.Join(dir, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots of %s go to %s (set %s to keep them)", t.Name(), dir, uiArtifactsEnv)
	return dir
}

// do runs actions in the tab, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// open navigates to path on the server and waits for the page.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base.String()+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// eval evaluates a JavaScript expression in the page, waiting for it when
// it is a promise.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// text returns the text of the page's body.
func (b *browser) text() string { return eval[string](b, "document.body.innerText") }

// waitFor polls the JavaScript expression cond until it is true, for at
// most d; it reports whether it became true. While the browser moves to
// the next page, the document has no body yet: cond that throws then
// counts as not true yet.
func (b *browser) waitFor(cond string, d time.Duration) bool {
	b.t.Helper()
	deadline := time.Now().Add(d)
	guarded := "(() => { try { return !!(" + cond + "); } catch (e) { return false; } })()"
	for {
		if eval[bool](b, guarded) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// screenshot saves a full-page screenshot as NAME.png in the artifacts.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// phone emulates a phone's screen, 390x844 CSS pixels.
func (b *browser) phone() {
	b.do("emulate a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
}

// desktop ends the phone emulation.
func (b *browser) desktop() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		b.t.Fatal(err)
	}
}

// cookie returns the value of the browser's cookie name for the server.
func (b *browser) cookie(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base.String() + "/"}})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// checkRequests fails the test for every request a page made to another
// host than the server, and returns how many requests there were.
func (b *browser) checkRequests() int {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil || u.Host != b.base.Host || (u.Scheme != "http" && u.Scheme != "https") {
			b.t.Errorf("a page requested %s, which is not on the server %s", r, b.base.Host)
		}
	}
	return len(b.requests)
}

// checkConsole fails the test for every error and uncaught exception the
// console showed, and returns how many messages there were.
func (b *browser) checkConsole() int {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			b.t.Errorf("console %s [%s] %s (%s:%d)", m.Type, m.Source, m.Text, m.URL, m.Line)
		}
	}
	return len(b.console)
}

// checkConsoleExcept is checkConsole, but lets pass the network errors of
// requests to url, which the test made to be refused.
func (b *browser) checkConsoleExcept(url string) {
	b.t.Helper()
	b.mu.Lock()
	kept := b.console[:0:0]
	for _, m := range b.console {
		if !(m.Source == "network" && strings.HasSuffix(m.URL, url)) {
			kept = append(kept, m)
		}
	}
	b.console = kept
	b.mu.Unlock()
	b.checkConsole()
}

// loadedBytes returns the bytes of responses loaded since the last call:
// what went over the wire, headers included.
func (b *browser) loadedBytes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := int(b.loaded)
	b.loaded = 0
	return n
}

// forgetConsole drops the console messages so far.
func (b *browser) forgetConsole() {
	b.mu.Lock()
	b.console = nil
	b.mu.Unlock()
}

// uiPage is a page of the dashboard and what must show on it: CSS
// selectors of elements that have to be visible within the window's
// width, without scrolling sideways.
type uiPage struct {
	name, path string
	keys       []string
}

// visibleJS returns, for a selector, why its first element is not fully
// visible within the window's width ("" when it is).
const visibleJS = `((sel) => {
	const el = document.querySelector(sel);
	if (!el) return "missing";
	const r = el.getBoundingClientRect();
	if (r.width < 1 || r.height < 1 || getComputedStyle(el).visibility !== "visible" || el.closest("[hidden]")) return "not visible";
	if (r.left < 0 || r.right > window.innerWidth + 0.5) return "outside the window: " + Math.round(r.left) + " to " + Math.round(r.right) + " of " + window.innerWidth + "px";
	return "";
})`

// checkPage opens a page at the browser's width, waits until it is live
// (when it follows streams),
// fails the test when the page is wider than the window or one of its key
// elements is not visible within it, and keeps a screenshot named
// WIDTH-NAME.
func (b *browser) checkPage(p uiPage, width int) {
	b.t.Helper()
	b.open(p.path)
	if eval[bool](b, `!!document.body.dataset.watch`) && !b.waitFor(`document.getElementById("live").textContent === "live"`, 10*time.Second) {
		b.t.Errorf("%s at %dpx: the live indicator says %q", p.path, width, eval[string](b, `document.getElementById("live").textContent`))
	}
	if w := eval[int](b, `window.innerWidth`); w != width {
		b.t.Fatalf("%s: innerWidth %d, want %d", p.path, w, width)
	}
	if sw := eval[int](b, `document.documentElement.scrollWidth`); sw > width {
		b.t.Errorf("%s is %dpx wide in a %dpx window: it scrolls sideways", p.path, sw, width)
	}
	for _, key := range p.keys {
		if why := eval[string](b, fmt.Sprintf("%s(%q)", visibleJS, key)); why != "" {
			b.t.Errorf("%s at %dpx: %s: %s", p.path, width, key, why)
		}
	}
	b.screenshot(fmt.Sprintf("%d-%s", width, p.name))
}

// checkRefsAndAuthors fails the test when a ref on the page breaks inside
// a word (refs/he|ads/main), or an author on the commits list takes more
// than one line or, cut short, does not show whole on hover.
func (b *browser) checkRefsAndAuthors(width int, longAuthor string) {
	b.t.Helper()
	broken := eval[string](b, `Array.from(document.querySelectorAll(".ref")).map(el => {
		const words = [];
		const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
		for (let n; (n = walk.nextNode()); ) {
			let at = 0;
			for (const word of n.data.split("/")) {
				const r = document.createRange();
				r.setStart(n, at);
				r.setEnd(n, at + word.length);
				if (word && r.getClientRects().length > 1) words.push(word);
				at += word.length + 1;
			}
		}
		return words.join(" ");
	}).filter(Boolean).join("; ")`)
	if broken != "" {
		b.t.Errorf("%s at %dpx: refs break inside the words %s", eval[string](b, "location.pathname"), width, broken)
	}
	if eval[string](b, "location.pathname") != "/commits" {
		return
	}
	tall := eval[int](b, `Array.from(document.querySelectorAll("div.author")).filter(el => el.getClientRects().length !== 1 || el.offsetHeight > 1.5 * parseFloat(getComputedStyle(el).lineHeight)).length`)
	if tall != 0 {
		b.t.Errorf("/commits at %dpx: %d authors take more than one line", width, tall)
	}
	cut := eval[string](b, fmt.Sprintf(`(Array.from(document.querySelectorAll("div.author")).find(el => el.textContent === %q) || {}).title || "none"`, longAuthor))
	if cut != longAuthor {
		b.t.Errorf("/commits at %dpx: the long author's title is %q, want the whole of it", width, cut)
	}
}

// block makes the tab's requests to URLs that match patterns (URLPattern
// strings, such as *://*:*/api/v1/*) fail as if the network refused
// them; block() lets every request through again.
func (b *browser) block(patterns ...string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	params := network.SetBlockedURLsParams{}
	for _, p := range patterns {
		params.URLPatterns = append(params.URLPatterns, &network.BlockPattern{URLPattern: p, Block: true})
	}
	if _, err := chromedp.Call(ctx, network.SetBlockedURLs, params); err != nil {
		b.t.Fatal(err)
	}
}
