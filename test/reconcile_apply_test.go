package test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReconcileFirstPush pushes the examples and checks that the server
// created exactly the declared machines, labelled with their tenant, role,
// node group and provider, and that the commit succeeded.
func TestReconcileFirstPush(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv

	c := s.WaitCommit(e.first)
	if c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("phase %s, want Succeeded (%s)", c.Status.Phase, c.Status.Message)
	}
	if c.Spec.SHA != e.first || c.Spec.Ref != "refs/heads/main" || !strings.Contains(c.Spec.Message, "Example tenants") {
		t.Errorf("commit spec %+v: want sha %s on refs/heads/main with the pushed message", c.Spec, e.first)
	}
	if c.Status.NonFastForward {
		t.Error("the first commit is marked nonFastForward")
	}
	for tenant, want := range map[string]schema.PlanSummary{
		"production": {Add: 5 + e2eSecretsResources, Machines: schema.PlanCounts{Add: 5}},
		"staging":    {Add: 2 + e2eSecretsResources, Machines: schema.PlanCounts{Add: 2}},
	} {
		r := e2eResult(t, c, tenant)
		if r.Phase != schema.CommitSucceeded || r.Plan != want {
			t.Errorf("tenant %s: phase %s plan %s, want Succeeded %s (%s)", tenant, r.Phase, r.Plan, want, r.Error)
		}
		// The server writes tofu's CLI configuration itself; tofu must
		// find nothing wrong with it (a plugin cache dir that does not
		// exist makes concurrent first inits fail now and then).
		if strings.Contains(r.OutputTail, "problems with the CLI configuration") {
			t.Errorf("tenant %s: tofu complains about the server's CLI configuration:\n%.400s", tenant, r.OutputTail)
		}
	}

	all := s.machines("")
	want := map[string]int{
		"production/controlplane": 3, "production/workers": 2,
		"staging/controlplane": 1, "staging/workers": 1,
	}
	if diff := cmp.Diff(want, e2eCounts(all)); diff != "" {
		t.Fatalf("machines per tenant/node group (-want +got):\n%s", diff)
	}
	names := map[string]bool{}
	for _, m := range all {
		l := m.Metadata.Labels
		tenant, ng := l["rezuscloud.io/tenant"], l["rezuscloud.io/node-group"]
		wantRole := map[string]string{"controlplane": "controlplane", "workers": "worker"}[ng]
		if l["rezuscloud.io/role"] != wantRole || l["rezuscloud.io/provider"] != "sim" {
			t.Errorf("machine %s labels %v: want role %s and provider sim", m.Metadata.Name, l, wantRole)
		}
		if m.Spec.Tenant != tenant || m.Spec.NodeGroup != ng || m.Spec.Role != wantRole || m.Spec.ProviderClass != "sim" {
			t.Errorf("machine %s spec %+v does not match its labels %v", m.Metadata.Name, m.Spec, l)
		}
		if m.Metadata.UID == "" || m.Spec.ProviderID != m.Metadata.Name || m.Spec.ManagementAddress == "" || m.Spec.Hostname == "" {
			t.Errorf("machine %s: uid %q, providerID %q, address %q, hostname %q: want all set, providerID = name",
				m.Metadata.Name, m.Metadata.UID, m.Spec.ProviderID, m.Spec.ManagementAddress, m.Spec.Hostname)
		}
		if names[m.Metadata.Name] {
			t.Errorf("machine %s listed twice", m.Metadata.Name)
		}
		names[m.Metadata.Name] = true
	}

	// The same machines through label selectors and the tenant's list.
	for sel, n := range map[string]int{
		"rezuscloud.io/tenant=production":                               5,
		"rezuscloud.io/tenant=production,rezuscloud.io/role=worker":     2,
		"rezuscloud.io/role=controlplane":                               4,
		"rezuscloud.io/provider=sim":                                    7,
		"rezuscloud.io/tenant=staging,rezuscloud.io/node-group=workers": 1,
	} {
		if got := len(s.machines(sel)); got != n {
			t.Errorf("labelSelector %s: %d machines, want %d", sel, got, n)
		}
	}
	for tenant, n := range map[string]int{"production": 5, "staging": 2} {
		ms := s.tenantMachines(tenant)
		if len(ms) != n {
			t.Errorf("/api/v1/tenants/%s/machines: %d machines, want %d", tenant, len(ms), n)
		}
		for _, m := range ms {
			if m.Spec.Tenant != tenant {
				t.Errorf("/api/v1/tenants/%s/machines lists %s of tenant %s", tenant, m.Metadata.Name, m.Spec.Tenant)
			}
		}
		var tn schema.Tenant
		s.mustGet("/api/v1/tenants/"+tenant, &tn)
		if tn.Status.ObservedCommit != e.first || tn.Status.Machines.Total != n || tn.Status.Machines.Desired != n {
			t.Errorf("tenant %s status %+v: want observedCommit %s and %d machines of %d desired", tenant, tn.Status, e.first, n, n)
		}
	}

	st := s.status()
	if st.Counts.Tenants != 2 || st.Counts.Machines != 7 || st.Counts.NodeGroups != 4 {
		t.Errorf("status counts %+v: want 2 tenants, 4 node groups, 7 machines", st.Counts)
	}
	if st.Reconciler.LastCommit != e.first || st.Reconciler.LastAppliedCommit != e.first || *st.Reconciler.TofuRuns == 0 {
		t.Errorf("status reconciler %+v: want %s applied with tofu runs", st.Reconciler, e.first)
	}
}

// TestReconcileScale scales node groups up and down: only the difference
// is created or destroyed, and the other machines keep their names and
// uids. The other tenant is left alone.
func TestReconcileScale(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	staging := e2eMachineIDs(s.machines("rezuscloud.io/tenant=staging"))

	steps := []struct {
		ng      string
		count   int
		workers int
		cps     int
		plan    schema.PlanSummary
	}{
		{"workers", 4, 4, 3, schema.PlanSummary{Add: 2, Machines: schema.PlanCounts{Add: 2}}},
		{"workers", 1, 1, 3, schema.PlanSummary{Destroy: 3, Machines: schema.PlanCounts{Destroy: 3}}},
		{"controlplane", 5, 1, 5, schema.PlanSummary{Add: 2, Machines: schema.PlanCounts{Add: 2}}},
		{"controlplane", 3, 1, 3, schema.PlanSummary{Destroy: 2, Machines: schema.PlanCounts{Destroy: 2}}},
	}
	for _, st := range steps {
		e.setCount("production", st.ng, st.count)
		sha := e.push(fmt.Sprintf("Scale production %s to %d", st.ng, st.count))
		c := s.waitApplied(sha)
		if c.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("%s=%d: phase %s: %s", st.ng, st.count, c.Status.Phase, e2eBrief(c.Status))
		}
		if r := e2eResult(t, c, "production"); r.Plan != st.plan {
			t.Errorf("%s=%d: production plan %s, want %s", st.ng, st.count, r.Plan, st.plan)
		}
		if r := e2eResult(t, c, "staging"); r.Plan != (schema.PlanSummary{}) || r.Phase != schema.CommitSucceeded {
			t.Errorf("%s=%d: staging result %s %s, want Succeeded +0 ~0 -0", st.ng, st.count, r.Phase, r.Plan)
		}

		after := e2eMachineIDs(s.machines(""))
		counts := e2eCounts(s.machines(""))
		if counts["production/workers"] != st.workers || counts["production/controlplane"] != st.cps {
			t.Fatalf("%s=%d: counts %v, want %d workers and %d control planes", st.ng, st.count, counts, st.workers, st.cps)
		}
		// Every machine that exists before and after keeps its uid; the
		// number that changed is exactly the plan's.
		var kept, added, removed int
		for name, uid := range before {
			if got, ok := after[name]; ok {
				kept++
				if got != uid {
					t.Errorf("%s=%d: machine %s changed uid %s -> %s", st.ng, st.count, name, uid, got)
				}
			} else {
				removed++
			}
		}
		added = len(after) - kept
		if added != st.plan.Add || removed != st.plan.Destroy {
			t.Errorf("%s=%d: %d machines added and %d removed, want %d and %d", st.ng, st.count, added, removed, st.plan.Add, st.plan.Destroy)
		}
		e2eSameIDs(t, "staging", staging, e2eMachineIDs(s.machines("rezuscloud.io/tenant=staging")))
		before = after
	}

	var ng schema.NodeGroup
	s.mustGet("/api/v1/tenants/production/node-groups/workers", &ng)
	if ng.Spec.Count != 1 || ng.Status.Machines.Total != 1 || ng.Status.Machines.Desired != 1 {
		t.Errorf("node group workers: count %d, status %+v: want 1 of 1", ng.Spec.Count, ng.Status.Machines)
	}
}

// TestReconcileInvalidCommit pushes commits with a schema error, a YAML
// error and a Talos patch of the machines' CA: nothing changes, no tofu
// runs, each commit says which file and line is wrong, and the next valid
// commit applies.
func TestReconcileInvalidCommit(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	runs := s.tofuRuns()

	e.setCount("production", "workers", 4)
	e.edit("clusters/production/nodegroups.yaml", "providerClass: sim\n  providerConfig:\n    shape: large", "providerClass: sim\n  providerConfig:\n    shape: large\n  colour: blue")
	bad := e.push("Scale workers, with a typo")
	c := s.WaitCommit(bad)
	if c.Status.Phase != schema.CommitInvalid {
		t.Fatalf("phase %s, want Invalid: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if len(c.Status.Problems) == 0 {
		t.Fatal("an Invalid commit without problems")
	}
	p := c.Status.Problems[0]
	if p.File != "clusters/production/nodegroups.yaml" || p.Line <= 0 || !strings.Contains(p.Message+p.Path, "colour") {
		t.Errorf("problem %+v: want clusters/production/nodegroups.yaml, a line, and the word colour", p)
	}
	if lines := strings.Split(e.read(p.File), "\n"); p.Line > 0 && p.Line <= len(lines) && !strings.Contains(lines[p.Line-1], "colour") {
		t.Errorf("problem at line %d, which is %q, not the line with colour", p.Line, lines[p.Line-1])
	}
	if len(c.Status.Tenants) != 0 {
		t.Errorf("an Invalid commit has tenant results %s", e2eBrief(c.Status))
	}
	st := s.status()
	if st.Reconciler.LastCommit != bad || st.Reconciler.LastAppliedCommit != e.first {
		t.Errorf("reconciler %+v: want last commit %s and last applied %s", st.Reconciler, bad, e.first)
	}
	if got := *st.Reconciler.TofuRuns; got != runs {
		t.Errorf("an invalid commit ran tofu: %d runs, were %d", got, runs)
	}
	if diff := cmp.Diff(before, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("an invalid commit changed machines (-before +after):\n%s", diff)
	}

	// A YAML syntax error, in a second file, is reported with its line too.
	e.work.Write("clusters/staging/broken.yaml", "apiVersion: rezuscloud.io/v1\nkind: ConfigPatch\nmetadata:\n  name: [oops\n")
	bad2 := e.push("Add a broken file")
	c = s.WaitCommit(bad2)
	if c.Status.Phase != schema.CommitInvalid {
		t.Fatalf("second bad commit: phase %s, want Invalid", c.Status.Phase)
	}
	var found bool
	for _, p := range c.Status.Problems {
		if p.File == "clusters/staging/broken.yaml" && p.Line > 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("problems %+v: want one at clusters/staging/broken.yaml with a line", c.Status.Problems)
	}
	if got := s.tofuRuns(); got != runs {
		t.Errorf("invalid commits ran tofu: %d runs, were %d", got, runs)
	}

	// With both fixed, a patch that would replace the machines' CA with the
	// committer's own is refused at its file:line: the secrets bundle owns
	// that field.
	e.work.Remove("clusters/staging/broken.yaml")
	e.edit("clusters/production/nodegroups.yaml", "\n  colour: blue", "")
	e.work.Write("clusters/staging/own-ca.yaml", "apiVersion: rezuscloud.io/v1\nkind: ConfigPatch\nmetadata:\n  name: own-ca\n"+
		"  labels:\n    rezuscloud.io/tenant: staging\nspec:\n  targetRole: controlplane\n  patch: |\n    machine:\n      ca:\n        crt: Y3J0\n        key: a2V5\n")
	bad3 := e.push("Trust my own CA")
	c = s.WaitCommit(bad3)
	if c.Status.Phase != schema.CommitInvalid || len(c.Status.Tenants) != 0 {
		t.Fatalf("a patch of machine.ca: phase %s, want Invalid and no tenant run: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	found = false
	for _, p := range c.Status.Problems {
		if p.File == "clusters/staging/own-ca.yaml" && p.Line == 9 && strings.Contains(p.Message, "may not set machine.ca") {
			found = true
		}
	}
	if !found {
		t.Errorf("problems %+v: want one at clusters/staging/own-ca.yaml:9 about machine.ca", c.Status.Problems)
	}
	if got := s.tofuRuns(); got != runs {
		t.Errorf("invalid commits ran tofu: %d runs, were %d", got, runs)
	}

	// Without that patch, the scale-up applies.
	e.work.Remove("clusters/staging/own-ca.yaml")
	good := e.push("Drop the patch of the CA")
	c = s.waitApplied(good)
	if c.Status.Phase != schema.CommitSucceeded || e2eResult(t, c, "production").Plan != (schema.PlanSummary{Add: 2, Machines: schema.PlanCounts{Add: 2}}) {
		t.Fatalf("fixed commit: phase %s: want Succeeded, production +2: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	after := e2eMachineIDs(s.machines(""))
	e2eSameIDs(t, "after the fix", before, after)
	if len(after) != len(before)+2 {
		t.Errorf("%d machines after the fix, want %d", len(after), len(before)+2)
	}
	// The invalid commits keep their records.
	if c, _ := s.Commit(bad); c.Status.Phase != schema.CommitInvalid {
		t.Errorf("commit %s is now %s, want it to stay Invalid", bad, c.Status.Phase)
	}
}

// TestReconcileReadmeOnly pushes commits that change no manifest: they
// succeed without a tofu run.
func TestReconcileReadmeOnly(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	runs := s.tofuRuns()

	// Outside the manifests path, then a non-YAML file inside it. Each is
	// pushed after the one before has been reconciled: the source polls,
	// so two quick pushes would reach it as one revision.
	var last string
	for _, change := range []struct{ path, content string }{
		{"README.md", "# Clusters\n\nNow with more words.\n"},
		{"clusters/README.md", e.read("clusters/README.md") + "\nOne more line.\n"},
	} {
		e.work.Write(change.path, change.content)
		sha := e.push("Reword " + change.path)
		c := s.waitApplied(sha)
		if c.Status.Phase != schema.CommitSucceeded {
			t.Errorf("%s: phase %s, want Succeeded", change.path, c.Status.Phase)
		}
		if len(c.Status.Tenants) != 2 {
			t.Errorf("%s: want results for production and staging: %s", change.path, e2eBrief(c.Status))
		}
		for _, r := range c.Status.Tenants {
			if r.Plan != (schema.PlanSummary{}) || r.Phase != schema.CommitSucceeded {
				t.Errorf("%s: tenant %s %s %s, want Succeeded +0 ~0 -0", change.path, r.Tenant, r.Phase, r.Plan)
			}
		}
		if got := s.tofuRuns(); got != runs {
			t.Fatalf("after a commit changing only %s: %d tofu runs, were %d: a no-change commit must run no tofu", change.path, got, runs)
		}
		last = sha
	}
	if diff := cmp.Diff(before, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines changed (-before +after):\n%s", diff)
	}
	// A commit that leaves a tenant's manifests as they are writes none of
	// its records: its observedCommit stays the commit that last changed it.
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/production", &tn)
	if tn.Status.ObservedCommit != e.first || last == e.first {
		t.Errorf("tenant production observedCommit %s, want %s, not the later %s", tn.Status.ObservedCommit, e.first, last)
	}
}

// TestReconcileConcurrentFirstInits applies a first commit of six tenants
// with six workers, so that six `tofu init` runs install the provider into
// the server's empty plugin cache at the same time. Every tenant must
// succeed; a few fresh servers in a row make a race show.
func TestReconcileConcurrentFirstInits(t *testing.T) {
	for round := range 3 {
		e := newE2E(t, e2eOptions{args: []string{"--workers", "6"}, noWait: true})
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("copy%d", i)
			for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
				e.work.Write("clusters/"+name+"/"+f, strings.ReplaceAll(e.read("clusters/staging/"+f), "staging", name))
			}
		}
		sha := e.push("Four more tenants")
		// The server may see the first commit or both; the second is
		// the one that must end up applied, every tenant at once or
		// production and staging before the copies.
		c := e.srv.WaitCommit(sha)
		if c.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("round %d: phase %s: %s", round, c.Status.Phase, e2eBrief(c.Status))
		}
		if n := len(e.srv.machines("")); n != 5+2*5 {
			t.Fatalf("round %d: %d machines, want %d", round, n, 5+2*5)
		}
	}
}
