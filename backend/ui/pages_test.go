package ui

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
)

// body reads a response's body and checks its status.
func body(t *testing.T, resp *http.Response, want int) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d:\n%s", resp.StatusCode, want, b)
	}
	return string(b)
}

// contains fails unless s has every one of want.
func contains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s: no %q in:\n%s", what, w, s)
		}
	}
}

// filled is a rig with two tenants (one failing, one forming), their
// objects and three commits, the newest invalid.
func filled(t *testing.T, o rigOptions) *rig {
	r := newRig(t, o)
	production := fleet("production", 3, 2)
	production[0].(*schema.Tenant).Status.Machines.NodesReady = 4
	r.put(production...)
	staging := fleet("staging", 1, 1)
	st := staging[0].(*schema.Tenant)
	st.Status.Phase, st.Status.Ready, st.Status.Machines.Ready = schema.TenantForming, false, 1
	r.put(staging...)
	ok := schema.TenantResult{Tenant: "production", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 6, Machines: schema.PlanCounts{Add: 5}},
		Plane: &schema.PlaneActions{Bootstrap: "production-controlplane-0"}}
	r.put(commit(sha(1), "Example tenants\n\nFirst of all.", testNow.Add(-50*time.Minute), schema.CommitSucceeded, ok,
		schema.TenantResult{Tenant: "staging", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2}}))
	r.put(commit(sha(2), "Scale staging", testNow.Add(-20*time.Minute), schema.CommitPartiallyFailed,
		schema.TenantResult{Tenant: "production", Phase: schema.CommitSucceeded, Plane: &schema.PlaneActions{Machines: 5, Configs: 5}},
		schema.TenantResult{Tenant: "staging", Phase: schema.CommitFailed, Plan: schema.PlanSummary{Add: 1, Change: 2, Destroy: 3},
			Error: "tofu apply: Error: instance quota exceeded\nmore detail"}))
	bad := commit(sha(3), "Break the manifests", testNow.Add(-5*time.Minute), schema.CommitInvalid)
	bad.Status.Problems = []schema.Problem{{File: "clusters/production/nodegroups.yaml", Line: 12, Path: "/spec/count", Message: "must be at least 1"}}
	r.put(bad)
	return r
}

func TestOverview(t *testing.T) {
	r := filled(t, rigOptions{})
	page := body(t, r.do("GET", "/", nil, ""), 200)
	contains(t, "overview", page, "production", "staging", "active", "forming", "1.34.1", "1.12.6",
		"instance quota exceeded", "+1</span> <span class=\"change\">~2</span> <span class=\"destroy\">-3",
		`href="/tenants/staging"`, `href="/commits/`+sha(3)+`"`, "Break the manifests", "1 failing",
		`1.34.1<div class="note">4 of 5 nodes Ready</div>`)
	if n := strings.Count(page, "nodes Ready"); n != 1 {
		t.Errorf("%d tenants show Nodes, want 1: staging's API was never observed", n)
	}
	// The failing tenant comes first, before the healthy one.
	if i, j := strings.Index(page, `href="/tenants/staging"`), strings.Index(page, `href="/tenants/production"`); i < 0 || j < 0 || i > j {
		t.Errorf("staging (failing) at %d, production at %d: the failing tenant must come first", i, j)
	}
	// Three commits in the timeline, oldest first.
	re := regexp.MustCompile(`<li><a class="(phase-[a-z]+)" href="/commits/([0-9a-f]+)"`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		got = append(got, m[1]+" "+m[2][:2])
	}
	if want := "phase-ok 01,phase-failed 02,phase-failed 03"; strings.Join(got, ",") != want {
		t.Errorf("timeline %v, want %s", got, want)
	}
	contains(t, "overview", page, `data-watch="/api/v1/tenants?watch=true /api/v1/commits/events"`, `<time datetime="2026-11-30T11:55:00Z" title="2026-11-30 11:55:00 UTC" data-age>5m ago</time>`)
	contains(t, "overview", page, "This server reconciles no repository")
}

func TestTenantPage(t *testing.T) {
	r := filled(t, rigOptions{})
	page := body(t, r.do("GET", "/tenants/staging", nil, ""), 200)
	contains(t, "tenant", page, "<h1>staging</h1>", "forming", "controlplane", "workers", "sim", "medium",
		`data-machine="staging-controlplane-0"`, `data-machine="staging-workers-0"`, "127.0.7.1",
		"cluster-name", "tenant staging", "ntp", "role controlplane",
		"instance quota exceeded", "Scale staging", "+2</span>",
		`<progress value="1" max="2"></progress> 1 of 2`)
	if strings.Contains(page, "more detail") {
		t.Error("the history shows more than the first line of an error")
	}
	if strings.Contains(page, "kubeconfig") {
		t.Error("a server that serves no downloads links a kubeconfig")
	}
	if n := strings.Count(page, `class="tile stage-ready"`); n != 2 {
		t.Errorf("%d ready tiles, want 2", n)
	}
	// History: newest first, the invalid commit has no result for it.
	if i, j := strings.Index(page, "Scale staging"), strings.Index(page, "Example tenants"); i < 0 || j < 0 || i > j {
		t.Errorf("history out of order")
	}
}

func TestMachinePage(t *testing.T) {
	r := filled(t, rigOptions{secrets: true})
	page := body(t, r.do("GET", "/tenants/production/machines/production-workers-1", nil, ""), 200)
	contains(t, "machine", page, "production-workers-1", "ready", "1.12.6", "rezuscloud.io/node-group=workers",
		`href="/api/v1/tenants/production/machines/production-workers-1/config"`)
	if strings.Contains(page, "data-logs") {
		t.Error("the page follows logs the server does not serve")
	}
	tenant := body(t, r.do("GET", "/tenants/production", nil, ""), 200)
	contains(t, "tenant", tenant, `href="/api/v1/tenants/production/kubeconfig"`, `href="/api/v1/tenants/production/talosconfig"`)
}

func TestCommitPages(t *testing.T) {
	r := filled(t, rigOptions{ui: Options{Origin: backend.Origin{Repo: "https://github.com/acme/infra.git"}}})
	list := body(t, r.do("GET", "/commits", nil, ""), 200)
	contains(t, "commits", list, "Break the manifests", "Scale staging", "Example tenants", "1 of 2 failed", "1 problem<", "page 1 · 3 commits",
		`<td class="ref">refs/<wbr>heads/<wbr>main</td>`, `<div class="muted author" title="Ada &lt;ada@example.internal&gt;">Ada &lt;ada@example.internal&gt;</div>`)
	page := body(t, r.do("GET", "/commits/"+sha(3), nil, ""), 200)
	contains(t, "commit", page, "Break the manifests", "Ada &lt;ada@example.internal&gt;", "refs/<wbr>heads/<wbr>main", "Invalid",
		`<a href="https://github.com/acme/infra/blob/`+sha(3)+`/clusters/production/nodegroups.yaml#L12">clusters/production/nodegroups.yaml:12</a>: /spec/count: must be at least 1`,
		`href="https://github.com/acme/infra/commit/`+sha(3)+`"`)
	failed := body(t, r.do("GET", "/commits/"+sha(2)[:10], nil, ""), 200)
	contains(t, "commit by prefix", failed, "PartiallyFailed", "tofu apply: Error: instance quota exceeded\nmore detail", `href="/tenants/staging"`,
		"rollout of 5 machines (5 configs)")
	// A result names the machines apart from the other resources, and what
	// the Talos plane did.
	first := body(t, r.do("GET", "/commits/"+sha(1), nil, ""), 200)
	contains(t, "first commit", first, "machines &#43;5, other &#43;1", "bootstrap on production-controlplane-0")
	if strings.Contains(first, "machines &#43;2") {
		t.Error("a result without machine counts is split as if it had them")
	}
}

// TestCommitPageNonFastForward: a commit that does not descend from the
// last one applied names and links that commit, and says whether it was
// refused.
func TestCommitPageNonFastForward(t *testing.T) {
	r := filled(t, rigOptions{})
	c := commit(sha(4), "Older, force-pushed", testNow.Add(-time.Minute), schema.CommitFailed)
	c.Status.NonFastForward = true
	c.Status.Ancestry = &schema.CommitAncestry{LastApplied: sha(2), Refused: true, Message: "04cccccccccc does not descend from 02cccccccccc, the last commit applied"}
	r.put(c)
	page := body(t, r.do("GET", "/commits/"+sha(4), nil, ""), 200)
	contains(t, "commit", page, "force push", "Not descended from", `<a href="/commits/`+sha(2)+`"><code>`+sha(2)[:12]+`</code></a>, the last commit applied: refused`,
		"04cccccccccc does not descend from 02cccccccccc")
	if page := body(t, r.do("GET", "/commits/"+sha(2), nil, ""), 200); strings.Contains(page, "Not descended from") {
		t.Error("a commit that descends from the last one applied says it does not")
	}
}

func TestNotFound(t *testing.T) {
	r := filled(t, rigOptions{})
	for _, path := range []string{
		"/tenants/nope", "/tenants/nope/machines/x", "/tenants/staging/machines/production-workers-0",
		"/tenants/production/machines/nope", "/commits/" + sha(99), "/commits/abc", "/commits?page=2", "/commits?page=x",
		"/nope", "/tenants", "/assets/app.css", "/assets/app.000000000000.css",
	} {
		resp := r.do("GET", path, nil, "")
		b := body(t, resp, http.StatusNotFound)
		if path != "/assets/app.css" && path != "/assets/app.000000000000.css" {
			contains(t, path, b, "404 Not Found", "<html")
		}
	}
	b := body(t, r.do("DELETE", "/tenants/production", nil, ""), http.StatusMethodNotAllowed)
	contains(t, "DELETE", b, "read-only")
}

// TestEscaping stores hostile text where a page shows it: it must come out
// as text, never as markup.
func TestEscaping(t *testing.T) {
	r := newRig(t, rigOptions{})
	const evil = `<script>alert(1)</script>`
	objs := fleet("prod", 1, 1)
	tn := objs[0].(*schema.Tenant)
	tn.Status.Message = "message " + evil
	tn.Spec.KubernetesVersion = evil
	m := objs[2].(*schema.Machine)
	m.Metadata.Name, m.Spec.Hostname = `m"><img src=x onerror=alert(1)>`, evil
	r.put(objs...)
	c := commit(sha(1), "title "+evil, testNow, schema.CommitInvalid)
	c.Spec.Author = evil
	c.Status.Problems = []schema.Problem{{File: "a/" + evil + ".yaml", Line: 3, Path: "/metadata/" + evil, Message: "manifest says " + evil}}
	c.Status.Message = evil
	r.put(c, commit(sha(2), "ok", testNow.Add(time.Minute), schema.CommitFailed,
		schema.TenantResult{Tenant: "prod", Phase: schema.CommitFailed, Error: evil}))
	for _, path := range []string{"/", "/tenants/prod", "/commits", "/commits/" + sha(1), "/commits/" + sha(2),
		"/tenants/prod/machines/" + `m%22%3E%3Cimg%20src=x%20onerror=alert%281%29%3E`} {
		page := body(t, r.do("GET", path, nil, ""), 200)
		if strings.Contains(page, evil) || strings.Contains(page, "<img src=x") {
			t.Errorf("%s renders hostile text as markup:\n%s", path, page)
		}
		if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s does not show the hostile text as text", path)
		}
	}
}

func TestParts(t *testing.T) {
	r := filled(t, rigOptions{})
	frag := body(t, r.do("GET", "/tenants/production?part=machines,history", nil, ""), 200)
	if !strings.HasPrefix(strings.TrimSpace(frag), `<section data-part="machines" data-kinds="Machine">`) {
		t.Errorf("fragment does not start with the machines region:\n%s", frag)
	}
	contains(t, "fragment", frag, `data-part="history"`, `data-machine="production-workers-1"`)
	for _, no := range []string{"<html", `data-part="groups"`, "<header"} {
		if strings.Contains(frag, no) {
			t.Errorf("fragment has %q", no)
		}
	}
	if frag := body(t, r.do("GET", "/?part=nope", nil, ""), 200); strings.TrimSpace(frag) != "" {
		t.Errorf("an unknown part renders %q", frag)
	}
}

func TestHeadersAndAssets(t *testing.T) {
	r := filled(t, rigOptions{})
	resp := r.do("GET", "/", nil, "")
	page := body(t, resp, 200)
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "script-src 'self'") || strings.Contains(got, "unsafe") {
		t.Errorf("CSP %q", got)
	}
	if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("page headers %v", resp.Header)
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, " style=") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page has an inline script, an inline style or a link to another host")
	}
	for _, u := range []string{assets.urls.CSS, assets.urls.JS, assets.urls.Icon} {
		if !strings.Contains(page, u) {
			t.Errorf("page does not link %s", u)
		}
		resp := r.do("GET", u, nil, "")
		body(t, resp, 200)
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q", u, cc)
		}
		if resp.Header.Get("ETag") == "" {
			t.Errorf("%s: no ETag", u)
		}
	}
	js := r.do("GET", assets.urls.JS, nil, "")
	if ct := js.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("script served as %q", ct)
	}
}

// TestOverviewRetrying: a tenant whose run waits for a retry comes after
// the failing ones and before the healthy ones, with its attempt, when it
// runs again and why.
func TestOverviewRetrying(t *testing.T) {
	r := filled(t, rigOptions{})
	objs := fleet("retried", 1, 1)
	objs[0].(*schema.Tenant).Status.Retry = &schema.RetryStatus{Attempts: 2, NextAttemptAt: testNow.Add(45 * time.Second), LastReason: schema.ReasonStateLocked}
	r.put(objs...)
	page := body(t, r.do("GET", "/", nil, ""), 200)
	contains(t, "overview", page, `<tr class="row-retrying">`, "retry 2", "in 45s", schema.ReasonStateLocked)
	failing, retried, healthy := strings.Index(page, `href="/tenants/staging"`), strings.Index(page, `href="/tenants/retried"`), strings.Index(page, `href="/tenants/production"`)
	if failing < 0 || retried < 0 || healthy < 0 || failing > retried || retried > healthy {
		t.Errorf("staging (failing) at %d, retried at %d, production at %d: want failing, then retrying, then healthy", failing, retried, healthy)
	}
}

// TestTenantPageWaitingForWindow: a tenant whose disruptive work waits for
// a maintenance window says what waits and when the window opens.
func TestTenantPageWaitingForWindow(t *testing.T) {
	r := filled(t, rigOptions{})
	objs := fleet("shop", 1, 1)
	objs[0].(*schema.Tenant).Status.Maintenance = &schema.MaintenanceStatus{Waiting: "scale-down of workers (2 machines)", NextWindow: testNow.Add(90 * time.Minute)}
	r.put(objs...)
	page := body(t, r.do("GET", "/tenants/shop", nil, ""), 200)
	contains(t, "tenant page", page, "<dt>Waiting</dt>", "for the maintenance window opening", "in 90m", "scale-down of workers (2 machines)")
}

// replicasOf is a backend.ReplicaSource that reports a fixed status.
type replicasOf struct{ st *api.ReplicasStatus }

func (r replicasOf) ReplicasStatus() *api.ReplicasStatus { return r.st }

// TestOverviewReplicas: a server that runs as one of several replicas
// shows them on the overview (name, leader, this server, shards, tenants)
// in a region of its own; a server that runs alone shows none.
func TestOverviewReplicas(t *testing.T) {
	r := filled(t, rigOptions{})
	if page := body(t, r.do("GET", "/", nil, ""), 200); strings.Contains(page, "Replicas") || strings.Contains(page, `data-part="replicas"`) {
		t.Errorf("a server without replicas shows a replicas panel:\n%s", page)
	}
	r.srv.SetReplicas(replicasOf{&api.ReplicasStatus{Self: "rc-b", Leader: "rc-a", Shards: 64, Unowned: 2, Members: []api.ReplicaStatus{
		{Name: "rc-a", Address: "https://rc-a.example:8443", Since: testNow.Add(-3 * time.Hour), Leader: true, Shards: 31, Tenants: 1},
		{Name: "rc-b", Since: testNow.Add(-10 * time.Minute), Shards: 31, Tenants: 1},
	}}})
	page := body(t, r.do("GET", "/", nil, ""), 200)
	contains(t, "overview", page, `<section class="card" data-part="replicas" data-kinds="Tenant" data-every="30">`, "<h2>Replicas</h2>",
		`2 live, 64 shards · <strong class="bad">2 unowned</strong>`,
		`<tr data-replica="rc-a">`+"\n"+`<td>rc-a <span class="badge phase-ok" title="reads git and records commits">leader</span><div class="note wrap">https://rc-a.example:8443</div></td>`+"\n"+
			`<td data-label="shards">31</td>`+"\n"+`<td data-label="tenants">1</td>`+"\n"+`<td data-label="joined"><time datetime="2026-11-30T09:00:00Z"`,
		`<td>rc-b <span class="badge" title="the replica that answered this page">this server</span></td>`)
	if n := strings.Count(page, ">leader</span>"); n != 1 {
		t.Errorf("%d leader badges, want 1", n)
	}
	frag := body(t, r.do("GET", "/?part=replicas", nil, ""), 200)
	if !strings.HasPrefix(strings.TrimSpace(frag), `<section class="card" data-part="replicas"`) || strings.Contains(frag, "<html") {
		t.Errorf("the replicas region alone:\n%s", frag)
	}

	r.srv.SetReplicas(replicasOf{&api.ReplicasStatus{Self: "rc-b", Shards: 64, Members: []api.ReplicaStatus{{Name: "rc-b", Shards: 64, Tenants: 2}}}})
	page = body(t, r.do("GET", "/?part=replicas", nil, ""), 200)
	contains(t, "overview without a leader", page, `1 live, 64 shards · <strong class="bad">no leader elected</strong></p>`)
}
