package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/replica"
)

// rigOptions say how startRig sets up replicas; the zero value is
// startReplicas' rig.
type rigOptions struct {
	// etcd is the cluster the replicas share; default: a new one of
	// three members.
	etcd *etcdtest.Cluster
	// e is the repository, with its first commit pushed; default:
	// stagingRepo.
	e *e2e
	// world is the dir of a running simulated world; default: a new
	// world.
	world string
	// tofu is the tofu binary of every replica; default: testenv's.
	tofu string
	// args are more serve flags of every replica.
	args []string
	// env holds more environment variables of every replica.
	env []string
}

// rig is a replicaSet with the etcd it runs on and the load balancer
// before it.
type rig struct {
	*replicaSet
	etcd  *etcdtest.Cluster
	lb    *balancer
	names []string
}

// startRig starts replicas r0, r1 and r2 as o says, behind a balancer.
func startRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if o.etcd == nil {
		o.etcd = etcdtest.Start(t, 3)
	}
	if o.world == "" {
		o.world = filepath.Join(t.TempDir(), "world")
		startSimWorld(t, o.world, "--sim-timings", planeTimings)
	}
	if o.e == nil {
		o.e = stagingRepo(t)
	}
	r := &rig{
		replicaSet: &replicaSet{t: t, e: o.e, world: o.world, servers: map[string]*e2eServer{}},
		etcd:       o.etcd, lb: newBalancer(t), names: []string{"r0", "r1", "r2"},
	}
	for _, name := range r.names {
		s := newE2EServer(t, servertest.Options{Data: filepath.Join(t.TempDir(), name), Repo: o.e.repo, Path: e2eManifests, Tofu: o.tofu,
			Args: append(replicaArgs(o.etcd, name, r.lb.url(), o.world), o.args...), Env: o.env})
		s.Start()
		r.servers[name] = s
		r.lb.add(s.Addr())
	}
	return r
}

// owner returns the replica that holds the tenant's shard in etcd, once
// one does.
func (r *rig) owner(tenant string) string {
	r.t.Helper()
	cli := r.etcd.Client(r.t)
	for deadline := time.Now().Add(e2eTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if h := shardHolder(cli, tenant); h != "" {
			return h
		}
	}
	r.t.Fatalf("no replica holds the shard of %s", tenant)
	return ""
}

// shardHolder returns the replica that holds the tenant's shard in etcd
// now, "" when none does.
func shardHolder(cli *clientv3.Client, tenant string) string {
	key := fmt.Sprintf("/rezuscloud-replicas/shards/%04d", replica.ShardOf(tenant, replica.DefaultShards))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// replicaArgs are the serve flags of replica name on etcd and the world,
// with tofu's state reaching the replicas through stateURL.
func replicaArgs(etcd *etcdtest.Cluster, name, stateURL, world string) []string {
	return []string{
		"--store", "etcd", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--replica-name", name, "--lease-ttl", replicaTTL.String(), "--state-url", stateURL,
		"--sim-world", world, "--poll-interval", "300ms", "--debounce", "0s",
		"--probe-ttl", "300ms", "--talos-timeout", "5s", "--talos-wait", "30s", "--drift-interval", "0"}
}

// stagingRepo starts a git daemon with a repository that holds tenant
// staging of the examples alone, pushed as the first commit.
func stagingRepo(t *testing.T) *e2e {
	t.Helper()
	e := newRepo(t)
	e.copyExamples()
	if err := os.RemoveAll(filepath.Join(e.work.Dir(), e2eManifests, "production")); err != nil {
		t.Fatal(err)
	}
	e.first = e.push("Tenant staging")
	return e
}

// newRepo starts a git daemon with an empty repository and a work tree
// that pushes to it.
func newRepo(t *testing.T) *e2e {
	t.Helper()
	e := &e2e{t: t, daemon: gittest.NewDaemon(t)}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	return e
}

// ready reports whether s answers /readyz with 200; a server that does
// not answer is not ready.
func ready(s *e2eServer) bool {
	resp, err := http.Get(s.URL() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// only makes every new connection go to addr alone, once it is ready.
func (b *balancer) only(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = []string{addr}
}

// countingTofu returns a tofu binary that runs the real one and first
// appends its subcommand to a log, and that log's path: every tofu
// process the replicas start, whichever replica it was, leaves a line.
func countingTofu(t *testing.T) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "tofu"), filepath.Join(dir, "runs.log")
	script := "#!/bin/sh\necho \"$1\" >> '" + log + "'\nexec '" + testenv.Tofu(t) + "' \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// tofuLog returns the subcommands of every tofu process countingTofu's
// log holds.
func tofuLog(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}
