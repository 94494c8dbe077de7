package servertest

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}

// TestOptionsFlags: the flags of serve that Options stand for, with the
// tools of a server that reconciles and the further Args last.
func TestOptionsFlags(t *testing.T) {
	t.Setenv("TOFU", "/opt/tofu")
	t.Setenv("REZUSCLOUD_PROVIDER_MIRROR", t.TempDir())
	got := Options{Data: "/d", Repo: "git://127.0.0.1/r.git", Path: "clusters", TokensFile: "/t", SimCloud: true, Args: []string{"--debounce", "0s"}}.Flags(t)
	want := []string{"--data", "/d", "--repo", "git://127.0.0.1/r.git", "--path", "clusters",
		"--tofu", "/opt/tofu", "--provider-mirror", os.Getenv("REZUSCLOUD_PROVIDER_MIRROR"), "--tokens-file", "/t", "--sim-cloud", "--debounce", "0s"}
	if !slices.Equal(got, want) {
		t.Errorf("Flags:\n got %q\nwant %q", got, want)
	}
	if got := (Options{Data: "/d"}).Flags(t); !slices.Equal(got, []string{"--data", "/d"}) {
		t.Errorf("Flags of a server without a source: %q, want the data dir alone", got)
	}
}

// TestServerLifecycle starts the real binary with a tokens file: it
// serves on loopback, refuses a request without a token and answers one
// with it; a stop ends in exit 0, a start again serves on the same
// address, a kill ends it at once, and NewPort moves it.
func TestServerLifecycle(t *testing.T) {
	file, tokens := Tokens(t, map[string]string{"ops": "admin"})
	s := Start(t, Options{TokensFile: file})
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.URL() != "http://"+s.Addr() {
		t.Fatalf("serving at %s (%s), want 127.0.0.1", s.Addr(), s.URL())
	}
	admin := http.Header{"Authorization": {"Bearer " + tokens["ops"]}}
	if code, _ := s.Request(http.MethodGet, "/api/v1/status", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("status without a token: %d, want 401", code)
	}
	if code, b := s.Request(http.MethodGet, "/api/v1/status", nil, admin); code != http.StatusOK {
		t.Errorf("status as admin: %d %s", code, b)
	}
	if rss := s.Memory("VmRSS"); rss <= 0 {
		t.Errorf("VmRSS %d", rss)
	}
	addr := s.Addr()
	s.Stop()
	if s.Running() || !strings.Contains(s.Log(), "msg=stopped") {
		t.Fatalf("after Stop: running %v, log:\n%s", s.Running(), s.LogWithoutRequests())
	}
	s.Start()
	if s.Addr() != addr {
		t.Errorf("started again on %s, want %s", s.Addr(), addr)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("running after Kill")
	}
	s.NewPort()
	s.Start()
	if code := s.Get("/healthz", nil); code != http.StatusOK {
		t.Errorf("/healthz after a start on a new port: %d", code)
	}
	if strings.Contains(s.LogWithoutRequests(), "msg=request ") {
		t.Error("LogWithoutRequests holds request lines")
	}
}

// TestStartBackend: the state backend in the test's process serves the
// API with what setup mounted, and stops when the test ends.
func TestStartBackend(t *testing.T) {
	mounted := false
	srv := StartBackend(t, backend.Config{}, func(*backend.Server) error { mounted = true; return nil })
	resp, err := http.Get(srv.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !mounted || !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Fatalf("/healthz at %s: %d, setup ran: %v", srv.URL(), resp.StatusCode, mounted)
	}
}
