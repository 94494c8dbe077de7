package test

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// The hardening tests of the server's HTTP side run the real `rezuscloud
// serve` binary, as an attacker or an unlucky client meets it: raw TCP
// connections that announce bodies they never send, trickle bytes, or sit
// idle; every method on every route; inputs of a megabyte echoed in errors.

// hbSecret signs webhooks in the hardening tests.
const hbSecret = "hardening-webhook-secret-0123456789"

// hbServer is a `rezuscloud serve` with a tokens file (alice and bob edit,
// ops admin, dash view; see tfsTokens), following an empty directory of
// manifests, so that the reconciler's routes (metrics, downloads,
// previews, webhooks) are mounted while no tofu runs.
type hbServer struct {
	*e2eServer
	addr    string
	secrets map[string]string
}

func hbStart(t *testing.T, args ...string) *hbServer {
	t.Helper()
	tokens, secrets := tfsTokens(t)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o700); err != nil {
		t.Fatal(err)
	}
	s := newE2EServer(t, servertest.Options{
		Data: filepath.Join(dir, "data"), TokensFile: tokens, Dir: manifests,
		Args: args, Env: []string{"REZUSCLOUD_WEBHOOK_SECRET=" + hbSecret},
	})
	s.Start()
	return &hbServer{e2eServer: s, addr: strings.TrimPrefix(s.URL(), "http://"), secrets: secrets}
}

// basic returns the Authorization header value of a token.
func (s *hbServer) basic(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+s.secrets[user]))
}

// dial opens a raw connection to the server.
func (s *hbServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// head writes a request's line and headers on c; extra lines are
// "Key: value".
func (s *hbServer) head(t *testing.T, c net.Conn, method, path string, length int, extra ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, s.addr)
	if length >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", length)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

// rss returns the server process's resident set size and its peak
// (VmRSS, VmHWM), in bytes.
func (s *hbServer) rss() (cur, peak int64) {
	return s.Memory("VmRSS"), s.Memory("VmHWM")
}

// hbClosed waits until the server closes c, reading what it sends; it
// fails the test if that takes longer than within. It returns the
// response the server sent first, if any, and how long it took.
func hbClosed(t *testing.T, what string, c net.Conn, within time.Duration) (*http.Response, time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(within))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		resp.Body.Close()
	}
	// Whatever else comes, the connection must end.
	var one [1]byte
	for {
		if _, err := br.Read(one[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: the server kept the connection open for %v", what, within)
			}
			return resp, time.Since(start)
		}
	}
}

// hbMB formats bytes as MB.
func hbMB(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
