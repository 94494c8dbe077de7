package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/webhook"
)

// hbAttackConns and hbAttackBytes shape the pre-allocation attack: that
// many connections each announce a state of that many bytes (the default
// --state-max-bytes) and send one byte of it.
const (
	hbAttackConns = 100
	hbAttackBytes = 64 << 20
)

// hbPeakLimit is the most the server may hold at its peak under the
// attack, everything included.
const hbPeakLimit = 300e6

// TestHardeningBodyPreallocation is the pre-allocation attack on the real
// binary: 100 edit-token POSTs that announce 64 MiB each and send one
// byte, in waves: the clients of the first waves hang up, as an attacker
// does to start again, and those of the last wait. The server must not
// reserve what was announced (its peak RSS stays under 300 MB), and must
// cut every waiting one off once the body timeout passes: a 408, then the
// connection closed by the server.
func TestHardeningBodyPreallocation(t *testing.T) {
	const timeout = 5 * time.Second
	const waves = 3
	s := hbStart(t, "--body-timeout", timeout.String())
	_, before := s.rss()
	var start time.Time
	var last []net.Conn
	for wave := range waves {
		start = time.Now()
		last = last[:0]
		for i := range hbAttackConns {
			c := s.dial(t)
			s.head(t, c, "POST", fmt.Sprintf("/tfstate/attack-%d", i), hbAttackBytes,
				"Authorization: "+s.basic("alice"), "Content-Type: application/json")
			if _, err := c.Write([]byte("{")); err != nil {
				t.Fatal(err)
			}
			last = append(last, c)
		}
		// Give the server time to take every body in hand.
		time.Sleep(time.Second)
		cur, peak := s.rss()
		t.Logf("wave %d: %d connections announced %d MiB each; server RSS %s, peak so far %s",
			wave+1, hbAttackConns, hbAttackBytes>>20, hbMB(cur), hbMB(peak))
		if wave < waves-1 {
			for _, c := range last {
				c.Close()
			}
		}
	}
	closed := 0
	for _, c := range last {
		resp, _ := hbClosed(t, "announced-but-never-sent POST", c, max(time.Until(start.Add(3*timeout)), time.Millisecond))
		if resp == nil || resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("announced-but-never-sent POST: answer %v, want 408 before the server hangs up", resp)
			continue
		}
		closed++
	}
	if elapsed := time.Since(start); elapsed > 3*timeout {
		t.Errorf("cutting off %d connections took %v, with a body timeout of %v", hbAttackConns, elapsed, timeout)
	}
	_, peak := s.rss()
	t.Logf("RSS of the server: %s before the attack, peak %s; %d of %d connections of the last wave answered 408 and were closed",
		hbMB(before), hbMB(peak), closed, hbAttackConns)
	if peak > hbPeakLimit {
		t.Errorf("peak RSS %s under the attack, want under %s", hbMB(peak), hbMB(hbPeakLimit))
	}
	// The server is none the worse.
	if code, body := tfsRequest(t, s.URL(), "GET", "/healthz", "", "", nil); code != http.StatusOK {
		t.Fatalf("healthz after the attack: %d %s", code, body)
	}
	if code, body := tfsRequest(t, s.URL(), "POST", "/tfstate/after", "alice", s.secrets["alice"], tfsBigState(1, 1000)); code != http.StatusOK {
		t.Fatalf("a POST after the attack: %d %s", code, body)
	}
}

// TestHardeningSlowClients: a trickled state POST and a trickled webhook
// are answered 408 and disconnected after the body timeout, an idle
// keep-alive connection is closed after the idle timeout, and a watch,
// which sends no body, outlives both timeouts several times over and
// keeps receiving its heartbeats.
func TestHardeningSlowClients(t *testing.T) {
	const bodyTimeout, idleTimeout = 3 * time.Second, 2 * time.Second
	s := hbStart(t, "--body-timeout", bodyTimeout.String(), "--idle-timeout", idleTimeout.String())

	watchStart := time.Now()
	lines := s.hbWatch(t, "/api/v1/machines?watch=true", "dash")
	if l := <-lines; !strings.Contains(l.text, `"type":"BOOKMARK"`) {
		t.Fatalf("watch: first line %q, want the initial BOOKMARK", l.text)
	}

	var wg sync.WaitGroup
	trickle := func(what, path string, header ...string) {
		defer wg.Done()
		c := s.dial(t)
		s.head(t, c, "POST", path, 1000, header...)
		stop := make(chan struct{})
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		resp, took := hbClosed(t, what, c, 4*bodyTimeout)
		close(stop)
		if resp == nil || resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("%s: answer %v, want 408", what, resp)
		}
		if took < bodyTimeout-time.Second/2 {
			t.Errorf("%s: cut off after %v, before the body timeout of %v", what, took, bodyTimeout)
		}
		t.Logf("%s: cut off after %v", what, took.Round(10*time.Millisecond))
	}
	wg.Add(3)
	go trickle("trickled state POST", "/tfstate/slow", "Authorization: "+s.basic("alice"))
	go trickle("trickled webhook", "/hooks/generic", webhook.SignatureHeader+": "+webhook.Sign([]byte(strings.Repeat(" ", 1000)), []byte(hbSecret)))
	go func() {
		defer wg.Done()
		c := s.dial(t)
		s.head(t, c, "GET", "/healthz", -1)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
			t.Errorf("keep-alive GET /healthz: %v %v", resp, err)
			return
		}
		resp.Body.Close()
		idleSince := time.Now()
		var one [1]byte
		c.SetReadDeadline(idleSince.Add(4 * idleTimeout))
		_, err = br.Read(one[:])
		took := time.Since(idleSince)
		switch {
		case err == nil:
			t.Error("idle keep-alive connection: the server sent bytes nobody asked for")
		case took >= 4*idleTimeout:
			t.Errorf("idle keep-alive connection still open after %v, with an idle timeout of %v", took, idleTimeout)
		case took < idleTimeout-time.Second/2:
			t.Errorf("idle keep-alive connection closed after %v, before the idle timeout of %v", took, idleTimeout)
		default:
			t.Logf("idle keep-alive connection closed after %v", took.Round(10*time.Millisecond))
		}
	}()
	wg.Wait()

	// The watch is still open, long past both timeouts, and its next
	// heartbeat (every 15 s by default) arrives.
	for l := range lines {
		if l.err != nil {
			t.Fatalf("watch ended after %v: %v", time.Since(watchStart), l.err)
		}
		if strings.Contains(l.text, `"type":"BOOKMARK"`) {
			age := l.at.Sub(watchStart)
			if age < 3*bodyTimeout {
				continue
			}
			t.Logf("watch heartbeat after %v, with body and idle timeouts of %v and %v", age.Round(10*time.Millisecond), bodyTimeout, idleTimeout)
			return
		}
	}
	t.Fatal("watch ended")
}

// TestHardeningBodyBudget: with --body-memory as small as the largest
// state, two large POSTs that both arrive halfway cannot both be held.
// The first one to reach its body deadline while waiting for budget gets
// 503 with Retry-After, and gives back what it held, so the other
// completes; the budget is whole again afterwards.
func TestHardeningBodyBudget(t *testing.T) {
	const timeout = 4 * time.Second
	const limit = 1 << 20
	s := hbStart(t, "--state-max-bytes", "1048576", "--body-memory", "1048576", "--body-timeout", timeout.String())
	body := func(serial int) []byte {
		b := tfsBigState(serial, 990_000)
		if len(b) > limit {
			t.Fatalf("state of %d bytes is over the limit", len(b))
		}
		return b
	}
	a, b := body(1), body(2)
	// send opens a POST of st and returns a function that sends its
	// next part, in order, and one that waits for the answer.
	send := func(name string, st []byte) (next func(), result func() *http.Response) {
		c := s.dial(t)
		sum := md5.Sum(st)
		s.head(t, c, "POST", "/tfstate/"+name, len(st), "Authorization: "+s.basic("alice"),
			"Content-MD5: "+base64.StdEncoding.EncodeToString(sum[:]))
		parts := make(chan []byte, 2)
		parts <- st[:600_000]
		parts <- st[600_000:]
		close(parts)
		gate := make(chan struct{}, 2)
		go func() {
			// A write blocks while the server does not read.
			for p := range parts {
				<-gate
				if _, err := c.Write(p); err != nil {
					return
				}
			}
		}()
		done := make(chan *http.Response, 1)
		go func() {
			c.SetReadDeadline(time.Now().Add(4 * timeout))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("POST %s: %v", name, err)
				resp = nil
			}
			done <- resp
		}()
		return func() { gate <- struct{}{} }, func() *http.Response { return <-done }
	}
	nextA, resultA := send("budget-a", a)
	nextA()
	time.Sleep(time.Second)
	nextB, resultB := send("budget-b", b)
	nextB()
	time.Sleep(500 * time.Millisecond)
	nextA()
	nextB()
	ra, rb := resultA(), resultB()
	if ra == nil || ra.StatusCode != http.StatusServiceUnavailable || ra.Header.Get("Retry-After") == "" {
		t.Errorf("the first POST, waiting for budget past its deadline: %v, want 503 with Retry-After", ra)
	} else {
		t.Logf("first POST: %d, Retry-After %s", ra.StatusCode, ra.Header.Get("Retry-After"))
	}
	if rb == nil || rb.StatusCode != http.StatusOK {
		t.Errorf("the second POST, once the first gave its budget back: %v, want 200", rb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/tfstate/budget-a", bytes.NewReader(a))
	req.SetBasicAuth("alice", s.secrets["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST after the contest: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST of the largest state after the contest: %d, want 200: the budget was not given back", resp.StatusCode)
	}
}

// hbLine is one line a watch read, or how it ended.
type hbLine struct {
	text string
	at   time.Time
	err  error
}

// hbWatch opens a watch as user and streams its lines until it ends.
func (s *hbServer) hbWatch(t *testing.T, path, user string) <-chan hbLine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, s.secrets[user])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %d", path, resp.StatusCode)
	}
	out := make(chan hbLine, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			out <- hbLine{text: sc.Text(), at: time.Now()}
		}
		err := sc.Err()
		if err == nil {
			err = errHBWatchEnded
		}
		if ctx.Err() == nil {
			out <- hbLine{err: err, at: time.Now()}
		}
	}()
	return out
}

var errHBWatchEnded = errors.New("the server ended the watch")
