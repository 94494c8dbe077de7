package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// The client is tested against the real server (backend.Server on
// 127.0.0.1:0, its store in t.TempDir()), seeded through its store as the
// reconciler would seed it.

type server struct {
	*backend.Server
	tokens map[string]string
}

// startServer runs a server; with tokens it has a tokens file with a
// "viewer" (view) and an "admin" token.
func startServer(t *testing.T, cfg backend.Config, tokens bool) *server {
	t.Helper()
	s := &server{tokens: map[string]string{}}
	cfg.Version = "test-1"
	if tokens {
		cfg.TokensFile, s.tokens = servertest.Tokens(t, map[string]string{"viewer": "view", "admin": "admin"})
	}
	s.Server = servertest.StartBackend(t, cfg, nil)
	return s
}

// put stores objects as the reconciler does: each under its kind and
// store key (TENANT/NAME for node groups and patches).
func (s *server) put(t *testing.T, objs ...schema.Object) {
	t.Helper()
	err := s.Store().Update(func(tx store.Tx) error {
		for _, o := range objs {
			kind, key := storeKey(o)
			if _, err := tx.PutObject(kind, key, o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func storeKey(o schema.Object) (string, string) {
	switch v := o.(type) {
	case *schema.Tenant:
		return schema.KindTenant, v.Metadata.Name
	case *schema.NodeGroup:
		return schema.KindNodeGroup, v.Tenant() + "/" + v.Metadata.Name
	case *schema.Machine:
		return schema.KindMachine, v.Metadata.Name
	case *schema.Commit:
		return schema.KindCommit, schema.CommitName(v.Spec.SHA)
	}
	panic(fmt.Sprintf("storeKey: %T", o))
}

func tenant(name string, labels map[string]string, phase schema.TenantPhase) *schema.Tenant {
	return &schema.Tenant{
		APIVersion: schema.APIVersion, Kind: schema.KindTenant,
		Metadata: schema.ObjectMeta{Name: name, Labels: labels, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		Spec:     schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", ControlPlaneEndpoint: "https://" + name + ".example:6443"},
		Status:   schema.TenantStatus{Phase: phase, Machines: schema.MachineCounts{Desired: 3, Total: 2}},
	}
}

func nodeGroup(tenant, name string, count int) *schema.NodeGroup {
	return &schema.NodeGroup{
		APIVersion: schema.APIVersion, Kind: schema.KindNodeGroup,
		Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelTenant: tenant, schema.LabelRole: schema.RoleWorker}},
		Spec:     schema.NodeGroupSpec{Count: count, ProviderClass: schema.ProviderSim},
	}
}

func newClient(t *testing.T, server, token string, trace func(string, string, int, time.Duration)) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Server: server, Token: token, Trace: trace, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestListFollowsPages(t *testing.T) {
	s := startServer(t, backend.Config{}, false)
	for i := range 5 {
		env := "b"
		if i%2 == 0 {
			env = "a"
		}
		s.put(t, tenant(fmt.Sprintf("t%d", i), map[string]string{"env": env}, schema.TenantActive))
	}
	var requests []string
	c := newClient(t, s.URL(), "", func(method, url string, status int, _ time.Duration) {
		requests = append(requests, fmt.Sprintf("%s %s %d", method, url, status))
	})
	c.SetPageSize(2)

	ts, err := c.Tenants(ctx(t), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tn := range ts {
		names = append(names, tn.Metadata.Name)
	}
	if got := strings.Join(names, ","); got != "t0,t1,t2,t3,t4" {
		t.Errorf("tenants %s, want t0..t4 in name order", got)
	}
	if len(requests) != 3 || !strings.Contains(requests[2], "offset=4") || !strings.HasSuffix(requests[2], " 200") {
		t.Errorf("requests %q, want 3 pages of 2", requests)
	}

	l, err := c.List(ctx(t), client.TenantsPath, client.ListOptions{Limit: 3})
	if err != nil || len(l.Items) != 3 || l.Total != 5 {
		t.Errorf("Limit 3: %d items, total %d, err %v; want 3 of 5", len(l.Items), l.Total, err)
	}
	ts, err = c.Tenants(ctx(t), client.ListOptions{LabelSelector: "env=a"})
	if err != nil || len(ts) != 3 || ts[2].Metadata.Name != "t4" {
		t.Errorf("env=a: %+v, %v; want t0, t2, t4", ts, err)
	}
	ts, err = c.Tenants(ctx(t), client.ListOptions{Offset: 4})
	if err != nil || len(ts) != 1 || ts[0].Metadata.Name != "t4" {
		t.Errorf("offset 4: %+v, %v; want t4", ts, err)
	}
}

func TestTypedGets(t *testing.T) {
	s := startServer(t, backend.Config{}, false)
	s.put(t, tenant("acme", nil, schema.TenantForming), nodeGroup("acme", "workers", 4), &schema.Commit{
		APIVersion: schema.APIVersion, Kind: schema.KindCommit,
		Metadata: schema.ObjectMeta{Name: "0123456789abcdef0123456789abcdef01234567"},
		Spec:     schema.CommitSpec{SHA: "0123456789abcdef0123456789abcdef01234567", Message: "scale"},
		Status:   schema.CommitStatus{Phase: schema.CommitSucceeded, Tenants: []schema.TenantResult{{Tenant: "acme", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2}}}},
	})
	c := newClient(t, s.URL(), "", nil)
	tn, err := c.Tenant(ctx(t), "acme")
	if err != nil || tn.Status.Phase != schema.TenantForming || tn.Metadata.ResourceVersion == "" {
		t.Fatalf("tenant %+v, %v", tn, err)
	}
	ng, err := c.NodeGroup(ctx(t), "acme", "workers")
	if err != nil || ng.Spec.Count != 4 || ng.Tenant() != "acme" {
		t.Fatalf("node group %+v, %v", ng, err)
	}
	ngs, err := c.NodeGroups(ctx(t), "acme", client.ListOptions{})
	if err != nil || len(ngs) != 1 {
		t.Fatalf("node groups %+v, %v", ngs, err)
	}
	cm, err := c.Commit(ctx(t), "0123456")
	if err != nil || cm.Spec.Message != "scale" || cm.Status.Tenants[0].Plan.String() != "+2 ~0 -0" {
		t.Fatalf("commit by prefix: %+v, %v", cm, err)
	}
	st, err := c.Status(ctx(t))
	if err != nil || st.Server.Version != "test-1" || st.Counts.Tenants != 1 || st.Counts.NodeGroups != 1 || st.Source != nil || st.Replicas != nil || len(st.Raw) == 0 {
		t.Fatalf("status %+v, %v", st, err)
	}
	v, err := c.ServerVersion(ctx(t))
	if err != nil || v.Version != "test-1" || v.GoVersion == "" {
		t.Fatalf("version %+v, %v", v, err)
	}
}

func TestErrors(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	s.put(t, tenant("acme", nil, schema.TenantActive))

	viewer := newClient(t, s.URL(), s.tokens["viewer"], nil)
	_, err := viewer.Tenant(ctx(t), "nope")
	if !client.IsNotFound(err) || !strings.HasPrefix(err.Error(), `tenant "nope" not found`) {
		t.Errorf("missing tenant: %v, want a 404 naming it", err)
	}
	_, err = viewer.NodeGroup(ctx(t), "acme", "nope")
	if !client.IsNotFound(err) || err.Error() != `node group "nope" not found in tenant "acme"` {
		t.Errorf("missing node group: %v", err)
	}
	_, err = viewer.Tenants(ctx(t), client.ListOptions{LabelSelector: "!!"})
	if client.Code(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "labelSelector") {
		t.Errorf("bad selector: %v, want a 400 naming labelSelector", err)
	}

	const badToken = "not-a-real-token-0123456789"
	bad := newClient(t, s.URL(), badToken, nil)
	_, err = bad.Tenants(ctx(t), client.ListOptions{})
	if !client.IsAuth(err) || !strings.HasPrefix(err.Error(), "the server rejected the token (401): ") {
		t.Errorf("bad token: %v, want a 401", err)
	}
	if err != nil && strings.Contains(err.Error(), badToken) {
		t.Errorf("the error repeats the token: %v", err)
	}
	if _, err := newClient(t, s.URL(), "", nil).Tenants(ctx(t), client.ListOptions{}); client.Code(err) != http.StatusUnauthorized {
		t.Errorf("no token: %v, want a 401", err)
	}
	// The view role may not read TF state, which needs edit.
	_, err = viewer.GetBytes(ctx(t), "/tfstate/acme")
	if client.Code(err) != http.StatusForbidden || !strings.HasPrefix(err.Error(), "the token may not do this (403): ") {
		t.Errorf("viewer reading state: %v, want a 403", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	_, err = newClient(t, closed, "", nil).Tenants(ctx(t), client.ListOptions{})
	if !client.IsConn(err) || err.Error() != "cannot reach "+closed+": connection refused" {
		t.Errorf("closed port: %v", err)
	}
}

// TestErrorBodyThatIsNotAPI reads what a proxy in front of the server may
// answer: text, not the API's error body.
func TestErrorBodyThatIsNotAPI(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream connect error\nmore detail", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, err := newClient(t, proxy.URL, "", nil).Tenants(ctx(t), client.ListOptions{})
	if client.Code(err) != http.StatusBadGateway || err.Error() != "server error (502): upstream connect error" {
		t.Errorf("got %v", err)
	}
}

func TestNewRefusesBadServers(t *testing.T) {
	for _, s := range []string{"ftp://x", "127.0.0.1:8080", "http://", "https://user:secret@example.com"} {
		_, err := client.New(client.Options{Server: s})
		if err == nil {
			t.Errorf("%s: no error", s)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", s, err)
		}
	}
	c, err := client.New(client.Options{Server: "https://rc.example.com/prefix/"})
	if err != nil || c.Server() != "https://rc.example.com/prefix" {
		t.Errorf("server with a path: %v, %v", c, err)
	}
}

// proxy forwards TCP connections to a server and can cut them off and
// refuse new ones, as a network outage would.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

// setDown cuts every connection and refuses new ones, or lets them in
// again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// next reads an event within a deadline.
func next(t *testing.T, w *client.Watcher) client.Event {
	t.Helper()
	type result struct {
		ev  client.Event
		err error
	}
	ch := make(chan result, 1)
	go func() { ev, err := w.Next(); ch <- result{ev, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Next: %v", r.err)
		}
		return r.ev
	case <-time.After(20 * time.Second):
		t.Fatal("Next: no event in 20s")
	}
	return client.Event{}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

func describe(ev client.Event) string {
	if ev.InitialEnd() {
		return "BOOKMARK initial-end"
	}
	return ev.Type + " " + ev.Meta.Kind + " " + ev.Meta.Metadata.Name
}

// TestWatchResumesAfterOutage cuts the connection of a watch, changes
// objects meanwhile, and expects the watch to deliver exactly those
// changes once the server is reachable again.
func TestWatchResumesAfterOutage(t *testing.T) {
	s := startServer(t, backend.Config{}, false)
	s.put(t, tenant("a", nil, schema.TenantActive))
	p := startProxy(t, s.Addr())
	c := newClient(t, p.URL(), "", nil)
	var mu sync.Mutex
	var reasons []string
	w, err := c.Watch(ctx(t), client.TenantsPath, client.WatchOptions{
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		OnReconnect: func(reason error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, reason.Error())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, want := range []string{"ADDED Tenant a", "BOOKMARK initial-end"} {
		if got := describe(next(t, w)); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	s.put(t, tenant("b", nil, schema.TenantForming))
	if got := describe(next(t, w)); got != "ADDED Tenant b" {
		t.Fatalf("got %q, want ADDED b", got)
	}
	rvB := w.ResourceVersion()

	p.setDown(true)
	s.put(t, tenant("c", nil, schema.TenantForming), tenant("b", nil, schema.TenantActive))
	time.AfterFunc(300*time.Millisecond, func() { p.setDown(false) })

	got := []string{describe(next(t, w)), describe(next(t, w))}
	if strings.Join(got, "; ") != "MODIFIED Tenant b; ADDED Tenant c" && strings.Join(got, "; ") != "ADDED Tenant c; MODIFIED Tenant b" {
		t.Fatalf("after the outage: %q, want the two changes made meanwhile and nothing else", got)
	}
	if after, before := atoi(t, w.ResourceVersion()), atoi(t, rvB); after <= before {
		t.Errorf("resourceVersion %d did not move past %d", after, before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) == 0 || !strings.HasPrefix(reasons[0], "cannot reach "+p.URL()) {
		t.Errorf("reconnect reasons %q, want the dropped stream first", reasons)
	}
}

// TestWatchStartsOverWhenHistoryIsGone resumes after more changes than
// the server keeps: the server answers 410 and the watch starts over from
// the current state.
func TestWatchStartsOverWhenHistoryIsGone(t *testing.T) {
	s := startServer(t, backend.Config{EventHistory: 2}, false)
	s.put(t, tenant("a", nil, schema.TenantActive))
	p := startProxy(t, s.Addr())
	var mu sync.Mutex
	var gone bool
	w, err := newClient(t, p.URL(), "", nil).Watch(ctx(t), client.TenantsPath, client.WatchOptions{
		MinBackoff: 20 * time.Millisecond,
		OnReconnect: func(reason error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			gone = gone || client.Code(reason) == http.StatusGone
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next(t, w)
	next(t, w)
	p.setDown(true)
	for i := range 6 {
		s.put(t, tenant(fmt.Sprintf("n%d", i), nil, schema.TenantForming))
	}
	p.setDown(false)
	var names []string
	for {
		ev := next(t, w)
		if ev.InitialEnd() {
			break
		}
		if ev.Type != client.Added {
			t.Fatalf("got %s, want ADDED events of the current state", describe(ev))
		}
		names = append(names, ev.Meta.Metadata.Name)
	}
	if len(names) != 7 {
		t.Errorf("current state %v, want all 7 tenants", names)
	}
	mu.Lock()
	defer mu.Unlock()
	if !gone {
		t.Error("no reconnection reported 410 Gone")
	}
}

func TestWatchRefusals(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	_, err := newClient(t, s.URL(), "wrong", nil).Watch(ctx(t), client.MachineEventsPath, client.WatchOptions{})
	if client.Code(err) != http.StatusUnauthorized {
		t.Errorf("bad token: %v, want 401", err)
	}
	_, err = newClient(t, s.URL(), s.tokens["viewer"], nil).Watch(ctx(t), client.TenantsPath, client.WatchOptions{ResourceVersion: "999999"})
	if client.Code(err) != http.StatusGone {
		t.Errorf("resourceVersion from the future: %v, want 410", err)
	}
}

func TestWatchCloseAndCancel(t *testing.T) {
	s := startServer(t, backend.Config{}, false)
	c := newClient(t, s.URL(), "", nil)
	w, err := c.Watch(ctx(t), client.MachineEventsPath, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); !ev.InitialEnd() {
		t.Fatalf("got %s, want the initial BOOKMARK of an empty state", describe(ev))
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Next(); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	w.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Next after Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Next")
	}

	cctx, cancel := context.WithCancel(context.Background())
	w, err = c.Watch(cctx, client.CommitEventsPath, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next(t, w)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v, want context.Canceled", err)
	}
}
