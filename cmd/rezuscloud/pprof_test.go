package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// parsePprofListen parses args and env for `serve` and returns the
// --pprof-listen it ends up with.
func parsePprofListen(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	var got string
	cmd := newServeCmd(func(k string) string { return env[k] }, func(_ context.Context, f *serveFlags, _ io.Writer) error {
		got = f.pprofListen
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPprofListenFlag(t *testing.T) {
	if got := parsePprofListen(t, nil); got != "" {
		t.Fatalf("--pprof-listen defaults to %q, want off", got)
	}
	if got := parsePprofListen(t, nil, "--pprof-listen", "127.0.0.1:6060"); got != "127.0.0.1:6060" {
		t.Fatalf("--pprof-listen 127.0.0.1:6060 gave %q", got)
	}
	if got := parsePprofListen(t, map[string]string{"REZUSCLOUD_PPROF_LISTEN": "[::1]:6061"}); got != "[::1]:6061" {
		t.Fatalf("REZUSCLOUD_PPROF_LISTEN gave %q", got)
	}
}

func TestPprofListenRefusesOtherAddresses(t *testing.T) {
	for _, addr := range []string{":6060", "0.0.0.0:6060", "[::]:6060", "10.1.2.3:6060", "example.com:6060", "127.0.0.1"} {
		p, err := listenPprof(addr)
		if err == nil {
			p.close()
			t.Errorf("listenPprof(%q) bound %s, want an error", addr, p.Addr())
			continue
		}
		if !strings.Contains(err.Error(), "--pprof-listen") || !strings.Contains(err.Error(), addr) {
			t.Errorf("listenPprof(%q): %v, want the flag and the address named", addr, err)
		}
	}
}

// TestMainServesPprof boots the server with --pprof-listen on loopback:
// its own listener serves a heap profile, the API's listener does not, and
// without the flag no profile listener exists.
func TestMainServesPprof(t *testing.T) {
	f := testServeFlags(t, servertest.Options{})
	off := NewMain(f, slog.New(slog.DiscardHandler))
	if err := off.Open(); err != nil {
		t.Fatal(err)
	}
	if off.pprof != nil {
		t.Errorf("without --pprof-listen the server bound %s", off.pprof.Addr())
	}
	off.Close()

	f.pprofListen = "127.0.0.1:0"
	m := NewMain(f, slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(time.Minute):
			t.Error("Run did not return after its context ended")
		}
	}()
	base := "http://" + m.pprof.Addr()
	if !strings.HasPrefix(m.pprof.Addr(), "127.0.0.1:") {
		t.Fatalf("pprof bound %s", m.pprof.Addr())
	}

	heap := get(t, base+"/debug/pprof/heap?gc=1")
	zr, err := gzip.NewReader(bytes.NewReader(heap))
	if err != nil {
		t.Fatalf("the heap profile is not gzipped protobuf: %v", err)
	}
	if raw, err := io.ReadAll(zr); err != nil || len(raw) == 0 {
		t.Fatalf("the heap profile does not decompress: %d bytes, %v", len(raw), err)
	}
	if text := get(t, base+"/debug/pprof/heap?debug=1"); !bytes.HasPrefix(text, []byte("heap profile:")) {
		t.Fatalf("heap?debug=1 served:\n%.200s", text)
	}
	resp, err := http.Get(m.Server.URL() + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(body, []byte("heap profile:")) {
		t.Fatal("the API's listener serves a heap profile")
	}
}

// get fetches url and fails unless it answers 200.
func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return body
}
