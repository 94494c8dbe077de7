package backend

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestForward: a server sends what it has no route for to the server
// its Forward names, with the caller's request as it came; a request
// that was sent on once is answered where it lands, so that two servers
// that each take the other for the leader do not pass it back and forth;
// an unreachable leader answers 502 (as backups do on a replica that
// does not lead: the leader takes them), and a Forward that says no leaves
// the request to this server's 404.
func TestForward(t *testing.T) {
	leader, follower := startServer(t, Config{}, false), startServer(t, Config{}, false)
	leader.Handle("POST /api/v1/reconcile", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("leader: " + r.URL.RawQuery))
	}))
	to := func(s *testServer) Forward {
		u, err := url.Parse(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		return func() (*url.URL, bool) { return u, true }
	}
	check := func(what string, s *testServer, r req, code int, body string) {
		t.Helper()
		got, b := s.do(t, r)
		if got != code || !strings.Contains(string(b), body) {
			t.Errorf("%s: %d %s, want %d with %q", what, got, b, code, body)
		}
	}
	reconcile := req{method: "POST", path: "/api/v1/reconcile?from=follower"}
	check("before a Forward", follower, reconcile, http.StatusNotFound, "no such resource")
	backups := req{method: "GET", path: "/api/v1/tenants/staging/backups"}
	check("backups before a Forward", follower, backups, http.StatusServiceUnavailable, "no backup store")

	follower.SetForward(to(leader))
	check("forwarded", follower, reconcile, http.StatusAccepted, "leader: from=follower")
	check("a path the leader has no route for either", follower, req{method: "GET", path: "/api/v1/nothing"}, http.StatusNotFound, "no such resource")
	check("a POST where only GET is served", follower, req{method: "POST", path: "/api/v1/tenants"}, http.StatusMethodNotAllowed, "read-only")
	check("what the follower serves itself", follower, req{method: "GET", path: "/api/v1/tenants"}, http.StatusOK, "items")

	leader.SetForward(to(follower))
	check("two servers that each take the other for the leader", follower, req{method: "GET", path: "/api/v1/nothing"}, http.StatusNotFound, "no such resource")

	gone := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
	follower.SetForward(func() (*url.URL, bool) { return gone, true })
	check("an unreachable leader", follower, reconcile, http.StatusBadGateway, "does not answer")
	check("backups, which the leader takes", follower, backups, http.StatusBadGateway, "does not answer")
	follower.SetForward(func() (*url.URL, bool) { return nil, false })
	check("a Forward that says no", follower, reconcile, http.StatusNotFound, "no such resource")
}

// TestLeaderHandler: a path only the leader serves outside the API (the
// push webhooks) goes to the leader while this replica follows, answers
// 503 while no replica leads, and is served here once this replica leads.
func TestLeaderHandler(t *testing.T) {
	leader, follower := startServer(t, Config{}, false), startServer(t, Config{}, false)
	serve := func(who string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(who + ": " + r.URL.Path + " forwarded=" + r.Header.Get(forwardedHeader)))
		})
	}
	leader.HandleUnauthenticated("/hooks/", serve("leader"))
	hooks := follower.LeaderHandler()
	follower.HandleUnauthenticated("/hooks/", hooks)
	check := func(what string, code int, body string) {
		t.Helper()
		got, b := follower.do(t, req{method: "POST", path: "/hooks/generic"})
		if got != code || !strings.Contains(string(b), body) {
			t.Errorf("%s: %d %s, want %d with %q", what, got, b, code, body)
		}
	}
	check("no replica leads", http.StatusServiceUnavailable, "no replica leads now")
	u, err := url.Parse(leader.URL())
	if err != nil {
		t.Fatal(err)
	}
	follower.SetForward(func() (*url.URL, bool) { return u, true })
	check("another replica leads", http.StatusAccepted, "leader: /hooks/generic forwarded=1")
	hooks.Set(serve("follower"))
	check("this replica leads", http.StatusAccepted, "follower: /hooks/generic forwarded=")
}
