package backend

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusalsRig is a refusals on a clock the test moves, whose window ends
// when the test says (fire).
type refusalsRig struct {
	r     *refusals
	out   *syncBuffer
	log   *slog.Logger
	now   time.Time
	mu    sync.Mutex
	fires []func()
}

func newRefusalsRig() *refusalsRig {
	g := &refusalsRig{out: &syncBuffer{}, now: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)}
	g.log = slog.New(slog.NewTextHandler(g.out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	g.r = newRefusals()
	g.r.now = func() time.Time { return g.now }
	g.r.after = func(_ time.Duration, f func()) *time.Timer {
		g.mu.Lock()
		g.fires = append(g.fires, f)
		g.mu.Unlock()
		return time.NewTimer(time.Hour)
	}
	return g
}

// fire ends every window whose end was scheduled.
func (g *refusalsRig) fire() {
	g.mu.Lock()
	fs := g.fires
	g.fires = nil
	g.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func (g *refusalsRig) lines() []string {
	return strings.Split(strings.TrimSpace(g.out.String()), "\n")
}

// TestRefusalsBounded: 1,000 refusals of one kind from one client in a
// minute make two audit lines, the first and one that counts the rest;
// another client or kind has its own; the next minute starts again.
func TestRefusalsBounded(t *testing.T) {
	g := newRefusalsRig()
	for i := range 1000 {
		g.r.warn(g.log, "failed login", "127.0.0.9", "ana: invalid", "user", "ana", "try", i)
	}
	g.r.warn(g.log, "failed login", "127.0.0.8", "ana: invalid", "user", "ana", "try", 0)
	g.r.warn(g.log, "failed login", "127.0.0.9", "bo: invalid", "user", "bo", "try", 0)
	if got := g.lines(); len(got) != 3 {
		t.Fatalf("in the minute: %d lines, want the first of each client and kind (3):\n%s", len(got), g.out)
	}
	g.fire()
	got := g.lines()
	if len(got) != 4 || !strings.Contains(got[3], `msg="failed login (repeated)" user=ana try=999 repeated=999 since=2026-12-06T03:00:00Z`) {
		t.Fatalf("at the minute's end, want one line that counts the 999 others:\n%s", g.out)
	}
	g.now = g.now.Add(DefaultRefusalWindow)
	g.r.warn(g.log, "failed login", "127.0.0.9", "ana: invalid", "user", "ana", "try", 1000)
	if got := g.lines(); len(got) != 5 || !strings.Contains(got[4], "try=1000") || strings.Contains(got[4], "repeated") {
		t.Fatalf("the next minute's first refusal is written as it comes:\n%s", g.out)
	}
}

// TestRefusalsWindowEndsLate: a window whose timer has not run yet when
// the next refusal comes after it is counted then, once.
func TestRefusalsWindowEndsLate(t *testing.T) {
	g := newRefusalsRig()
	for range 3 {
		g.r.warn(g.log, "credential refused", "(unknown)", "signature")
	}
	g.now = g.now.Add(2 * DefaultRefusalWindow)
	g.r.warn(g.log, "credential refused", "(unknown)", "signature")
	g.fire() // the old window's timer, late: it counted already
	out := g.out.String()
	if strings.Count(out, "repeated=2") != 1 || strings.Count(out, `msg="credential refused"`) != 2 {
		t.Fatalf("want two first lines and one count of 2:\n%s", out)
	}
}

// TestRefusalsManyClients: beyond the bound, refusals of new clients are
// counted together, so the memory they take is bounded too.
func TestRefusalsManyClients(t *testing.T) {
	g := newRefusalsRig()
	g.r.max = 10
	for i := range 50 {
		g.r.warn(g.log, "download refused", fmt.Sprintf("127.0.1.%d", i), "credentials")
	}
	if n := len(g.r.seen); n > 11 {
		t.Errorf("%d clients counted, want at most the bound and one for the others", n)
	}
	g.r.close()
	out := g.out.String()
	if strings.Count(out, `msg="download refused"`) != 11 || !strings.Contains(out, `repeated=39`) || !strings.Contains(out, `clients="(other clients)"`) {
		t.Fatalf("want ten clients' lines, the others' first, and one count of the 39 others:\n%s", out)
	}
}
