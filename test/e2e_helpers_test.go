package test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The end-to-end tests of the reconcile loop run the real `rezuscloud serve`
// binary against a real git daemon on loopback, the real tofu binary and the
// simulated provider from the provider mirror. They observe the server
// through its HTTP API only.

// e2eTimeout bounds the tests' own waits, as servertest bounds the rig's.
const e2eTimeout = servertest.WaitTimeout

// e2eSecretsResources counts the resources a tenant's state holds besides
// its machines: the terraform_data that keeps its Talos secrets. A tenant's
// first apply creates them and its removal destroys them.
const e2eSecretsResources = 1

// e2eManifests is the path inside the repository that holds the manifests.
const e2eManifests = "clusters"

func TestMain(m *testing.M) {
	code := m.Run()
	servertest.RemoveBuilds()
	os.Exit(code)
}

// e2eServer is a `rezuscloud serve` subprocess (see servertest) with what
// the end-to-end tests read of it through its API.
type e2eServer struct {
	*servertest.Server
	t *testing.T
}

// newE2EServer prepares a server as o says; Start runs it.
func newE2EServer(t *testing.T, o servertest.Options) *e2eServer {
	t.Helper()
	return &e2eServer{Server: servertest.New(t, o), t: t}
}

// mustGet fetches path and fails the test unless it answers 200.
func (s *e2eServer) mustGet(path string, v any) {
	s.t.Helper()
	if code := s.Get(path, v); code != http.StatusOK {
		s.t.Fatalf("GET %s: %d, want 200", path, code)
	}
}

// e2eStatus is the part of /api/v1/status the tests read, decoded by its
// JSON names.
type e2eStatus struct {
	Counts struct {
		Tenants    int `json:"tenants"`
		NodeGroups int `json:"nodeGroups"`
		Machines   int `json:"machines"`
		Commits    int `json:"commits"`
	} `json:"counts"`
	Source struct {
		URL       string `json:"url"`
		Revision  string `json:"revision"`
		LastError string `json:"lastError"`
		Errors    int    `json:"errors"`
		Failures  int    `json:"failures"`
		Polls     int    `json:"polls"`
		Fetches   int    `json:"fetches"`
	} `json:"source"`
	Reconciler struct {
		LastCommit        string `json:"lastCommit"`
		LastAppliedCommit string `json:"lastAppliedCommit"`
		TofuRuns          *int64 `json:"tofuRuns"`
	} `json:"reconciler"`
}

func (s *e2eServer) status() e2eStatus {
	s.t.Helper()
	var st e2eStatus
	s.mustGet("/api/v1/status", &st)
	if st.Reconciler.TofuRuns == nil {
		s.t.Fatal("/api/v1/status has no reconciler.tofuRuns")
	}
	return st
}

// tofuRuns returns how many tofu processes the server has started.
func (s *e2eServer) tofuRuns() int64 {
	s.t.Helper()
	return *s.status().Reconciler.TofuRuns
}

// waitApplied waits until the reconciler reports sha as its last applied
// commit, which it does once every tenant of sha has finished without
// failure, and returns the Commit.
func (s *e2eServer) waitApplied(sha string) schema.Commit {
	s.t.Helper()
	s.WaitFor("commit "+sha[:12]+" to be applied", s.applied(sha))
	return s.WaitCommit(sha)
}

// waitFleetApplied is waitApplied for a commit of a fleet of tenants,
// which takes as long as the fleet is large: it fails only when no tofu
// run was added for the wait's timeout.
func (s *e2eServer) waitFleetApplied(sha string) schema.Commit {
	s.t.Helper()
	s.WaitMoving("commit "+sha[:12]+" to be applied", s.tofuRuns, s.applied(sha))
	return s.WaitCommit(sha)
}

// applied reports whether the reconciler reports sha as its last applied
// commit, and fails the test when sha finished otherwise.
func (s *e2eServer) applied(sha string) func() bool {
	return func() bool {
		if s.status().Reconciler.LastAppliedCommit == sha {
			return true
		}
		if c, ok := s.Commit(sha); ok && c.Status.Phase.Done() && c.Status.Phase != schema.CommitSucceeded {
			s.t.Fatalf("commit %s finished %s, want Succeeded: %s", sha[:12], c.Status.Phase, e2eBrief(c.Status))
		}
		return false
	}
}

// machines lists /api/v1/machines with a label selector ("" for all).
func (s *e2eServer) machines(selector string) []schema.Machine {
	s.t.Helper()
	var list struct {
		Items []schema.Machine `json:"items"`
		Total int              `json:"total"`
	}
	s.mustGet("/api/v1/machines?limit=1000&labelSelector="+url.QueryEscape(selector), &list)
	if list.Total != len(list.Items) {
		s.t.Fatalf("machines %q: total %d but %d items", selector, list.Total, len(list.Items))
	}
	return list.Items
}

// tenantMachines lists /api/v1/tenants/{tenant}/machines.
func (s *e2eServer) tenantMachines(tenant string) []schema.Machine {
	s.t.Helper()
	var list struct {
		Items []schema.Machine `json:"items"`
		Total int              `json:"total"`
	}
	s.mustGet("/api/v1/tenants/"+tenant+"/machines?limit=1000", &list)
	return list.Items
}

// e2eMachineIDs maps every machine's name (its provider ID) to its uid.
func e2eMachineIDs(ms []schema.Machine) map[string]string {
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		out[m.Metadata.Name] = m.Metadata.UID
	}
	return out
}

// e2eCounts counts machines by "tenant/node-group" as their labels say.
func e2eCounts(ms []schema.Machine) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[m.Metadata.Labels[schema.LabelTenant]+"/"+m.Metadata.Labels["rezuscloud.io/node-group"]]++
	}
	return out
}

// e2eResult returns the result of tenant in c.
func e2eResult(t *testing.T, c schema.Commit, tenant string) schema.TenantResult {
	t.Helper()
	for _, r := range c.Status.Tenants {
		if r.Tenant == tenant {
			return r
		}
	}
	t.Fatalf("commit %s has no result for tenant %s: %s", c.Spec.SHA, tenant, e2eBrief(c.Status))
	return schema.TenantResult{}
}

// e2e is one git daemon serving the manifests repository, a work tree that
// pushes to it, and a server that reconciles it.
type e2e struct {
	t      *testing.T
	daemon *gittest.Daemon
	repo   string // git:// URL of the repository
	work   *gittest.Workdir
	srv    *e2eServer
	data   string
	first  string // the commit pushed by newE2E
}

// e2eOptions change how newE2E sets up.
type e2eOptions struct {
	// args are extra serve flags; a flag given here also given by default
	// (such as --poll-interval) is given twice and the later one wins.
	args []string
	// env holds extra environment variables of the server.
	env []string
	// noWait: do not wait for the first commit to be applied.
	noWait bool
}

// newE2E starts a git daemon, pushes the example manifests under clusters/
// (and a README.md at the top), starts the server and waits until the
// first commit has been applied.
func newE2E(t *testing.T, opts e2eOptions) *e2e {
	t.Helper()
	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(t.TempDir(), "data")}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	e.copyExamples()
	e.work.Write("README.md", "# Clusters\n\nManifests live under clusters/.\n")
	e.first = e.push("Example tenants production and staging")

	e.srv = newE2EServer(t, e.options(opts))
	e.srv.Start()
	if !opts.noWait {
		c := e.srv.waitApplied(e.first)
		if c.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("first commit: phase %s, want Succeeded: %s", c.Status.Phase, e2eBrief(c.Status))
		}
	}
	return e
}

// options are the server's for the e2e's repository: the simulated cloud,
// a poll every 300 ms and no debounce, and what opts add.
func (e *e2e) options(opts e2eOptions) servertest.Options {
	return servertest.Options{
		Data: e.data, Repo: e.repo, Path: e2eManifests, SimCloud: true,
		Args: append([]string{"--poll-interval", "300ms", "--debounce", "0s"}, opts.args...),
		Env:  opts.env,
	}
}

// copyExamples writes the repository's examples/ tree (its manifests and
// README) under clusters/ in the work tree.
func (e *e2e) copyExamples() {
	e.t.Helper()
	src := filepath.Join(testenv.Root(), "examples")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(src, p); err == nil && d.IsDir() && examples.IsCloud(filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		e.work.Write(e2eManifests+"/"+filepath.ToSlash(rel), string(b))
		return nil
	})
	if err != nil {
		e.t.Fatalf("copy examples: %v", err)
	}
}

// read returns a file of the work tree.
func (e *e2e) read(path string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.work.Dir(), filepath.FromSlash(path)))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// edit replaces old by new in a file of the work tree; old must occur
// exactly once.
func (e *e2e) edit(path, old, new string) {
	e.t.Helper()
	s := e.read(path)
	if n := strings.Count(s, old); n != 1 {
		e.t.Fatalf("edit %s: %q occurs %d times, want 1", path, old, n)
	}
	e.work.Write(path, strings.Replace(s, old, new, 1))
}

// setCount sets spec.count of a node group in clusters/TENANT/nodegroups.yaml.
func (e *e2e) setCount(tenant, nodeGroup string, count int) {
	e.t.Helper()
	path := e2eManifests + "/" + tenant + "/nodegroups.yaml"
	s := e.read(path)
	re := regexp.MustCompile(`(?s)(name: ` + regexp.QuoteMeta(nodeGroup) + `\n.*?count: )(\d+)`)
	if !re.MatchString(s) {
		e.t.Fatalf("setCount: no node group %s in %s", nodeGroup, path)
	}
	e.work.Write(path, re.ReplaceAllString(s, fmt.Sprintf("${1}%d", count)))
}

// push commits everything in the work tree and pushes it to main.
func (e *e2e) push(msg string) string {
	e.t.Helper()
	sha := e.work.Commit(msg)
	e.work.Push()
	return sha
}

// e2eKeys returns the sorted keys of m.
func e2eKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// e2eSameIDs fails unless every machine in before is still in after with
// the same uid.
func e2eSameIDs(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for name, uid := range before {
		got, ok := after[name]
		switch {
		case !ok:
			t.Errorf("%s: machine %s is gone", what, name)
		case got != uid:
			t.Errorf("%s: machine %s changed uid %s -> %s", what, name, uid, got)
		}
	}
}

// e2eBrief formats a commit's status for a failure message. tofu's output
// is replaced by its length and hash: it may hold cluster keys, and tests
// must not print those.
func e2eBrief(st schema.CommitStatus) string {
	st.Tenants = append([]schema.TenantResult(nil), st.Tenants...)
	for i, r := range st.Tenants {
		if r.OutputTail != "" {
			sum := sha256.Sum256([]byte(r.OutputTail))
			st.Tenants[i].OutputTail = fmt.Sprintf("(%d bytes of tofu output, sha256 %x)", len(r.OutputTail), sum[:8])
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}
