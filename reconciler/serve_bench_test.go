package reconciler

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/webhook"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// BenchmarkSeededNoChangeServe measures the no-change commit of
// BenchmarkSeededNoChangeCommit through the whole path a user sees: the
// real `rezuscloud serve` on the seeded data dir follows a repository that
// a real git daemon serves on loopback; one op commits a README change
// (no manifest changes), pushes it, and then times from the POST of a
// signed /hooks/generic until GET /api/v1/commits/{sha} answers Succeeded
// (api-ms), and until a watch of /api/v1/commits/events sends that phase
// (watch-ms). The server runs with its defaults but --poll-interval 1h (only
// the hook brings the commit in) and --drift-interval 0 (the seeded tenants
// have no workspaces to check).
//
// With -serve-vs BIN, a second server (BIN, for instance an earlier main)
// runs beside it on a copy of the same seeded data dir and its own
// repository, and every op times both, in turns, so that the load of the
// machine weighs on both alike.
//
// Each tenant has 8 machines (a control plane and 7 workers), recorded as
// an apply projects them and as the observer last saw them (connected,
// ready, their services running), and the Talos plane's records of a
// bootstrapped tenant whose rollout is complete, as in the fleets that
// bench/reconcile grows through tofu. What the seeded data dir lacks of
// such a fleet: TF state (so the observer, which needs each tenant's
// secrets bundle from it, probes none of the machines, and nothing serves
// them) and tofu's work directories beyond an empty one per tenant.
//
// With -test.v each op's figures are logged, with the server's own times:
// when its log says it accepted the hook and fetched, and when the Commit
// says it received, validated and finished the revision; so is how long
// after its start each server had reconciled the seeded revision.
// -serve-pprof ADDR serves the runtime profiles of this tree's server.
func BenchmarkSeededNoChangeServe(b *testing.B) {
	s := seedWith(b, 0, servedWorkers, servedMachines)
	seedPlane(b, s)
	// The servers open the data dir; the seeding reconciler lets it go.
	s.rec.Close()
	if err := s.store.Close(); err != nil {
		b.Fatal(err)
	}
	// Each server has a data dir of its own, copied before any opens one.
	data := []string{s.dataDir}
	if *serveVs != "" {
		data = append(data, filepath.Join(b.TempDir(), "data"))
		if out, err := exec.Command("cp", "-a", s.dataDir, data[1]).CombinedOutput(); err != nil {
			b.Fatalf("copy the seeded data dir: %v: %s", err, out)
		}
	}
	d := gittest.NewDaemon(b)
	servers := []*servedFleet{startServedFleet(b, s, d, "new", servertest.Binary(b), data[0])}
	if *serveVs != "" {
		servers = append(servers, startServedFleet(b, s, d, "vs", *serveVs, data[1]))
	}
	// A first commit after the start, not counted: the server's start-up
	// (the observer's first pass, the release of what start-up read) ends
	// about then.
	warm := pushNoChange(b, s, servers, 0)
	for _, srv := range servers {
		b.Logf("%s warm-up: %s", srv.name, srv.noChange(warm))
	}
	i := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		i++
		sha := pushNoChange(b, s, servers, i)
		// Turns: the first server of one op is the last of the next.
		order := slices.Clone(servers)
		if i%2 == 0 {
			slices.Reverse(order)
		}
		b.StartTimer()
		for _, srv := range order {
			op := srv.noChange(sha)
			srv.ops = append(srv.ops, op)
			b.Logf("%s op %d: %s", srv.name, i, op)
		}
	}
	b.StopTimer()
	for _, srv := range servers {
		srv.report()
	}
}

// pushNoChange commits a change of the repository's README, which is no
// manifest, and pushes it to every server's repository.
func pushNoChange(b *testing.B, s *seeded, servers []*servedFleet, round int) string {
	if err := os.WriteFile(filepath.Join(s.work.Dir(), "README.md"), fmt.Appendf(nil, "round %d\n", round), 0o644); err != nil {
		b.Fatal(err)
	}
	sha := s.work.Commit(fmt.Sprintf("readme %d", round))
	for _, srv := range servers {
		s.work.Run("push", "--quiet", srv.name, "HEAD:refs/heads/main")
	}
	return sha
}

// servedWorkers is the size of each seeded tenant's worker group.
const servedWorkers = 7

// servedMachines returns the Machines of a seeded tenant: one per slot of
// each node group, at a loopback address that nothing serves, each seen
// ready by the observer.
func servedMachines(td *schema.TenantDesired) []*schema.Machine {
	tenant := td.Tenant.Metadata.Name
	first, _ := strconv.Atoi(strings.TrimPrefix(tenant, "t"))
	first *= 1 + servedWorkers
	var out []*schema.Machine
	for _, ng := range td.NodeGroups {
		role := ng.Metadata.Labels[schema.LabelRole]
		for i := range ng.Spec.Count {
			id := fmt.Sprintf("sim-%s-%s-%d", tenant, ng.Metadata.Name, i)
			n := first + len(out)
			addr := fmt.Sprintf("127.209.%d.%d", n/250, n%250+1)
			m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine}
			m.Metadata.Name = id
			m.Metadata.Labels = map[string]string{schema.LabelTenant: tenant, schema.LabelNodeGroup: ng.Metadata.Name,
				schema.LabelRole: role, schema.LabelProvider: "sim"}
			m.Metadata.Annotations = map[string]string{"rezuscloud.io/slot": fmt.Sprintf("%s/%d", ng.Metadata.Name, i)}
			m.Spec = schema.MachineSpec{ManagementAddress: addr, ProviderID: id, ProviderClass: "sim", Shape: "small",
				Hostname: id, Role: role, Tenant: tenant, NodeGroup: ng.Metadata.Name,
				TFAddress: fmt.Sprintf("rezussim_machine.ng_%s[%d]", ng.Metadata.Name, i)}
			m.Status = schema.MachineStatus{Stage: schema.StageReady, Ready: true, TalosVersion: "v1.12.6",
				KubernetesVersion: "v1.34.1", ConfigUpToDate: true, Connected: true, Addresses: []string{addr},
				LastSeen: time.Now()}
			for _, svc := range []string{"apid", "auditd", "containerd", "cri", "dashboard", "kubelet", "machined", "syslogd", "udevd"} {
				m.Status.Services = append(m.Status.Services, schema.MachineService{Name: svc, State: "Running", Health: schema.ServiceHealthy})
			}
			out = append(out, m)
		}
	}
	return out
}

// seedPlane writes the Talos plane's records of every seeded tenant: its
// etcd bootstrapped on its control plane, its rollout complete.
func seedPlane(b *testing.B, s *seeded) {
	b.Helper()
	now := time.Now()
	err := s.store.Update(func(tx store.Tx) error {
		for i := range *seedFleet {
			tenant := manifestfleet.TenFiles(*seedFleet).Name(i)
			boot := talos.BootstrapRecord{Tenant: tenant, Machine: fmt.Sprintf("sim-%s-controlplane-0", tenant),
				Address: fmt.Sprintf("127.209.%d.%d", i*(1+servedWorkers)/250, i*(1+servedWorkers)%250+1), Done: true, StartedAt: now, DoneAt: now}
			rollout := talos.RolloutRecord{Tenant: tenant, Generation: "seeded", KubernetesVersion: "v1.34.1",
				Groups: map[string]talos.GroupRecord{
					"controlplane": {ConfigSHA256: "seeded-controlplane", TalosVersion: "v1.12.6"},
					"workers":      {ConfigSHA256: "seeded-workers", TalosVersion: "v1.12.6"},
				}, Completed: true, UpdatedAt: now}
			for kind, v := range map[string]any{talos.KindBootstrap: boot, talos.KindRollout: rollout} {
				if _, err := tx.Put(kind, tenant, mustJSON(v)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

var servePprof = flag.String("serve-pprof", "", "a loopback `ADDR` on which BenchmarkSeededNoChangeServe's server of this tree serves its runtime profiles (--pprof-listen)")

var serveVs = flag.String("serve-vs", "", "a second rezuscloud binary that BenchmarkSeededNoChangeServe runs beside this tree's, op for op (for instance an earlier main's)")

// servedFleet is a `rezuscloud serve` on a seeded data dir, following its
// own repository of the git daemon, with a watch of its commits open.
type servedFleet struct {
	b    *testing.B
	name string
	srv  *servertest.Server
	api  *client.Client
	url  string
	// seen gets the name of each commit the watch sees Succeeded, and when.
	seen chan commitSeen
	ops  []noChangeOp

	mu sync.Mutex
	// What the server logged of the last hook and of each new revision.
	accepted time.Time
	fetched  map[string]serveLogLine
}

// serveLogLine is what the benchmark reads of the server's log lines.
type serveLogLine struct {
	Time     time.Time
	Msg      string
	Revision string
	Took     time.Duration // of a fetch that found a new revision
}

type commitSeen struct {
	name string
	at   time.Time
}

// noChangeOp is what one op measured of one server.
type noChangeOp struct {
	api, watch time.Duration // from the hook's POST to Succeeded on a GET, on the watch
	// From the hook's POST to the server's timestamps: its log's of the
	// hook and the fetch, the commit's own.
	accepted, fetchStart, fetched, received, validated, finished time.Duration
}

func (op noChangeOp) String() string {
	return fmt.Sprintf("api %.1f ms, watch %.1f ms; hook accepted at %.1f, fetch %.1f–%.1f, received %.1f, validated %.1f, finished %.1f ms",
		ms(op.api), ms(op.watch), ms(op.accepted), ms(op.fetchStart), ms(op.fetched), ms(op.received), ms(op.validated), ms(op.finished))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// startServedFleet pushes the seeded repository to a new repository name
// of d, starts bin on dataDir following it, and waits until the server has
// reconciled the seeded revision.
func startServedFleet(b *testing.B, s *seeded, d *gittest.Daemon, name, bin, dataDir string) *servedFleet {
	b.Helper()
	repo := d.URL(name + ".git")
	d.CreateBare(name + ".git")
	s.work.Run("remote", "add", name, repo)
	s.work.Run("push", "--quiet", name, "HEAD:refs/heads/main")
	srv := &servedFleet{b: b, name: name, seen: make(chan commitSeen, 64), fetched: map[string]serveLogLine{}}
	args := []string{"--poll-interval", "1h", "--drift-interval", "0", "--log-format", "json"}
	if *servePprof != "" && name == "new" {
		args = append(args, "--pprof-listen", *servePprof)
	}
	started := time.Now()
	srv.srv = servertest.Start(b, servertest.Options{Binary: bin, Data: dataDir, Repo: repo, SimCloud: takesSimCloud(b, bin),
		Args: args, Env: []string{webhook.SecretEnv + "=" + serveHookSecret}, Log: serveLog{srv}})
	srv.url = srv.srv.URL()
	var err error
	if srv.api, err = client.New(client.Options{Server: srv.url}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	head := s.work.Rev("HEAD")
	for {
		c, err := srv.api.Commit(ctx, head)
		if err == nil && c.Status.Phase.Done() {
			if c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != *seedFleet {
				b.Fatalf("%s: the seeded revision: %s with %d results: %s\n%s", name, c.Status.Phase, len(c.Status.Tenants), c.Status.Message, srv.tail())
			}
			b.Logf("%s: the seeded revision Succeeded %v after the start", name, time.Since(started).Round(time.Millisecond))
			break
		}
		srv.sleep(ctx, 20*time.Millisecond)
	}
	w, err := srv.api.Watch(context.Background(), client.CommitEventsPath, client.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close() })
	go srv.follow(w)
	return srv
}

// takesSimCloud reports whether bin knows --sim-cloud: a build from
// before the flag (a -serve-vs of an earlier main) always ran the
// simulated cloud and refuses the flag.
func takesSimCloud(b *testing.B, bin string) bool {
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		b.Fatalf("%s serve --help: %v\n%s", bin, err, out)
	}
	return bytes.Contains(out, []byte("--sim-cloud"))
}

// serveHookSecret signs the hooks of BenchmarkSeededNoChangeServe.
const serveHookSecret = "seeded-no-change-serve-webhook-secret"

// serveLog reads the server's log lines as the server writes them: when
// it accepted the last hook, and each new revision's fetch.
type serveLog struct{ srv *servedFleet }

func (l serveLog) Write(p []byte) (int, error) {
	var rec serveLogLine
	if json.Unmarshal(p, &rec) == nil {
		l.srv.mu.Lock()
		switch rec.Msg {
		case "webhook accepted":
			l.srv.accepted = rec.Time
		case "new revision":
			l.srv.fetched[rec.Revision] = rec
		}
		l.srv.mu.Unlock()
	}
	return len(p), nil
}

// follow sends every commit the watch sees Succeeded to srv.seen.
func (srv *servedFleet) follow(w *client.Watcher) {
	for {
		ev, err := w.Next()
		if err != nil {
			return
		}
		at := time.Now()
		var c struct {
			Metadata struct{ Name string }
			Status   struct{ Phase schema.CommitPhase }
		}
		if ev.Type == client.Bookmark || json.Unmarshal(ev.Object, &c) != nil || c.Status.Phase != schema.CommitSucceeded {
			continue
		}
		select {
		case srv.seen <- commitSeen{c.Metadata.Name, at}:
		default: // nobody waits for it
		}
	}
}

// noChange posts the hook of a pushed commit sha that changes no
// manifest, and waits until its Commit is Succeeded on the API and on the
// watch.
func (srv *servedFleet) noChange(sha string) noChangeOp {
	b := srv.b
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var op noChangeOp
	start := time.Now()
	srv.hook()
	var c *schema.Commit
	for {
		var err error
		c, err = srv.api.Commit(ctx, sha)
		if err == nil && c.Status.Phase.Done() {
			op.api = time.Since(start)
			break
		}
		if err != nil && !client.IsNotFound(err) {
			b.Fatalf("%s: GET commit %s: %v\n%s", srv.name, sha, err, srv.tail())
		}
		srv.sleep(ctx, 5*time.Millisecond)
	}
	if c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != *seedFleet {
		b.Fatalf("%s: commit %s: %s with %d results: %s\n%s", srv.name, sha, c.Status.Phase, len(c.Status.Tenants), c.Status.Message, srv.tail())
	}
	for op.watch == 0 {
		select {
		case seen := <-srv.seen:
			if seen.name == schema.CommitName(sha) {
				op.watch = seen.at.Sub(start)
			}
		case <-ctx.Done():
			b.Fatalf("%s: the watch did not show commit %s Succeeded\n%s", srv.name, sha, srv.tail())
		}
	}
	t := c.Status.Timings
	op.received, op.validated, op.finished = t.ReceivedAt.Sub(start), t.ValidatedAt.Sub(start), t.FinishedAt.Sub(start)
	srv.mu.Lock()
	op.accepted = srv.accepted.Sub(start)
	if f, ok := srv.fetched[sha]; ok {
		op.fetchStart, op.fetched = f.Time.Add(-f.Took).Sub(start), f.Time.Sub(start)
	}
	srv.mu.Unlock()
	return op
}

// hook posts a signed generic webhook for the followed branch.
func (srv *servedFleet) hook() {
	b := srv.b
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, err := http.NewRequest(http.MethodPost, srv.url+webhook.Prefix+webhook.HookGeneric, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(serveHookSecret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("%s: POST %s: %d %s", srv.name, req.URL.Path, resp.StatusCode, answer)
	}
}

// report gives the figures of every op: min, median and max, and checks
// that no tofu process ran.
func (srv *servedFleet) report() {
	b := srv.b
	var st struct {
		Reconciler struct {
			TofuRuns int64 `json:"tofuRuns"`
		} `json:"reconciler"`
	}
	if err := srv.api.Get(context.Background(), "/api/v1/status", &st); err != nil {
		b.Fatal(err)
	}
	if st.Reconciler.TofuRuns != 0 {
		b.Fatalf("%s: %d tofu processes ran", srv.name, st.Reconciler.TofuRuns)
	}
	figures := []struct {
		unit string
		of   func(noChangeOp) time.Duration
	}{
		{"api-ms", func(op noChangeOp) time.Duration { return op.api }},
		{"watch-ms", func(op noChangeOp) time.Duration { return op.watch }},
		{"finished-ms", func(op noChangeOp) time.Duration { return op.finished }},
	}
	prefix := ""
	if srv.name != "new" {
		prefix = srv.name + "-"
	}
	for _, f := range figures {
		var ds []time.Duration
		for _, op := range srv.ops {
			ds = append(ds, f.of(op))
		}
		slices.Sort(ds)
		b.ReportMetric(ms(ds[0]), prefix+"min-"+f.unit)
		b.ReportMetric(ms(ds[len(ds)/2]), prefix+"median-"+f.unit)
		b.ReportMetric(ms(ds[len(ds)-1]), prefix+"max-"+f.unit)
	}
}

// sleep waits d, and fails the benchmark when the server exits or ctx
// ends first.
func (srv *servedFleet) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-srv.srv.Done():
		srv.b.Fatalf("%s: rezuscloud serve exited\n%s", srv.name, srv.tail())
	case <-ctx.Done():
		srv.b.Fatalf("%s: %v\n%s", srv.name, ctx.Err(), srv.tail())
	}
}

func (srv *servedFleet) tail() string { return srv.srv.Tail(40) }
