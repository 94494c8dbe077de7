// Package openstack benchmarks the apply of a tenant on the simulated
// OpenStack through the reconciler against a bare `tofu apply` of the same
// workspace (issue 13).
package openstack

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	sim "github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// target: the reconciler's apply may take at most 1.2× a bare tofu apply.
const target = 1.2

const tenant = "openstack-prod"

// rig is a reconciler in this process with a real state backend on
// loopback, the real tofu, the real OpenStack provider and the simulated
// OpenStack.
type rig struct {
	dir, tofu, cli, clouds string
	srv                    *servertest.Backend
	cloud                  *sim.Cloud
	rec                    *reconciler.Reconciler
	rev                    int
}

func newRig(b *testing.B) *rig {
	b.Helper()
	r := &rig{dir: b.TempDir(), tofu: testenv.Tofu(b)}
	b.Cleanup(func() { r.close() })
	var err error
	r.cloud, err = sim.Open(sim.Options{Dir: filepath.Join(r.dir, "cloud"), Addresses: netip.MustParsePrefix("127.4.0.0/16"),
		Credentials: sim.Credentials{Username: "bench", Password: "bench-password-0123", ProjectName: "tenants"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.cloud.Serve("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	r.clouds = filepath.Join(r.dir, "clouds.yaml")
	if err := os.WriteFile(r.clouds, r.cloud.CloudsYAML("rezus-openstack"), 0o600); err != nil {
		b.Fatal(err)
	}
	data := filepath.Join(r.dir, "data")
	r.srv, err = servertest.OpenBackend(backend.Config{DataDir: data}, nil)
	if err != nil {
		b.Fatal(err)
	}
	r.cli = filepath.Join(r.dir, "tofu.rc")
	if err := tfcli.WriteCLIConfig(r.cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(b)}); err != nil {
		b.Fatal(err)
	}
	runner, err := tofu.NewRunner(tofu.Options{Binary: r.tofu, CLIConfigFile: r.cli,
		Env: map[string]string{"OS_CLIENT_CONFIG_FILE": r.clouds, "REZUSSIM_DIR": filepath.Join(r.dir, "sim")}})
	if err != nil {
		b.Fatal(err)
	}
	r.rec, err = reconciler.New(r.srv.Store(), runner, render.Builtin(), reconciler.Options{DataDir: data, StateURL: r.srv.URL(), Workers: 2})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func (r *rig) close() {
	if r.rec != nil {
		r.rec.Close()
	}
	if r.srv != nil {
		r.srv.Close()
	}
	if r.cloud != nil {
		r.cloud.Close()
	}
}

// manifests is examples/openstack with cp control planes and w workers.
func manifests(b *testing.B, cp, w int) fstest.MapFS {
	m := fstest.MapFS{}
	err := fs.WalkDir(examples.CloudFS, "openstack", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(examples.CloudFS, p)
		if filepath.Base(p) == "nodegroups.yaml" {
			n := 0
			data = regexp.MustCompile(`count: \d+`).ReplaceAllFunc(data, func([]byte) []byte {
				n++
				return fmt.Appendf(nil, "count: %d", []int{cp, w}[n-1])
			})
		}
		m[p] = &fstest.MapFile{Data: data, Mode: 0o644}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func (r *rig) reconcile(b *testing.B, cp, w int) time.Duration {
	b.Helper()
	r.rev++
	start := time.Now()
	c, err := r.rec.Reconcile(context.Background(), sources.Snapshot{Revision: fmt.Sprintf("bench-%04d", r.rev),
		Ref: "refs/heads/main", Message: "bench\n\nRezuscloud-Allow-Deletions: 8\n", FS: manifests(b, cp, w), Root: "."})
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if c.Status.Phase != schema.CommitSucceeded {
		b.Fatalf("reconcile to %d+%d: %s %s %+v", cp, w, c.Status.Phase, c.Status.Message, c.Status.Tenants)
	}
	return took
}

func (r *rig) workDir() string { return filepath.Join(r.dir, "data", "work", tenant) }

// varFile writes the values of the workspace's sensitive variables (the
// secrets bundle, read back from the tenant's state, and the machine
// configs) where a bare tofu run can read them, as the reconciler gives
// them to its own runs.
func (r *rig) varFile(b *testing.B) string {
	b.Helper()
	bundle := r.rec.TalosBundle(tenant)
	d, err := schema.Load(manifests(b, 3, 5), ".", nil)
	if err != nil || len(bundle) == 0 {
		b.Fatalf("load manifests: %v; bundle of %d bytes", err, len(bundle))
	}
	ws, err := render.Builtin().Render(d.Tenants[0], bundle)
	if err != nil {
		b.Fatal(err)
	}
	vars, err := ws.VarFile()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(r.dir, "bare.tfvars.json")
	if err := os.WriteFile(path, vars, 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// bareApply writes main into the tenant's work directory and runs a bare
// `tofu apply` there with the environment the reconciler gives tofu; with
// planFirst it runs `tofu plan -out` and `tofu apply PLAN` instead, the two
// steps the reconciler takes.
func (r *rig) bareApply(b *testing.B, main []byte, vars string, planFirst bool) time.Duration {
	b.Helper()
	if err := os.WriteFile(filepath.Join(r.workDir(), render.MainFile), main, 0o600); err != nil {
		b.Fatal(err)
	}
	plan := filepath.Join(r.dir, "bare.tfplan")
	steps := [][]string{{"apply", "-auto-approve", "-input=false", "-no-color", "-var-file=" + vars}}
	if planFirst {
		steps = [][]string{{"plan", "-input=false", "-no-color", "-var-file=" + vars, "-out=" + plan},
			{"apply", "-auto-approve", "-input=false", "-no-color", plan}}
	}
	addr := r.srv.URL() + "/tfstate/" + tenant
	start := time.Now()
	for _, args := range steps {
		cmd := exec.Command(r.tofu, args...)
		cmd.Dir = r.workDir()
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TF_CLI_CONFIG_FILE=" + r.cli,
			"CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "OS_CLIENT_CONFIG_FILE=" + r.clouds,
			"TF_HTTP_ADDRESS=" + addr, "TF_HTTP_LOCK_ADDRESS=" + addr, "TF_HTTP_UNLOCK_ADDRESS=" + addr}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("bare tofu %s: %v\n%s", args[0], err, out.Bytes())
		}
	}
	return time.Since(start)
}

// BenchmarkApplyTenant measures the apply of a 3 + 5 machine tenant
// (examples/openstack: 8 servers, 3 ports, on a tenant whose server groups
// and secrets exist) through Reconcile against a bare `tofu apply` of the
// same workspace, with the same environment and state backend.
//
// One op is -rounds rounds of four steps on one tenant, interleaved so
// that load from elsewhere hits both sides alike:
//
//	reconcile   0+0 → 3+5   (measured)
//	bare tofu   3+5 → 0+0
//	bare tofu   0+0 → 3+5   (measured: apply)
//	bare tofu   3+5 → 0+0
//	bare tofu   0+0 → 3+5   (measured: plan -out, then apply PLAN)
//	reconcile   3+5 → 0+0
//
// rec-ns/apply is the median reconcile, bare-ns/apply the median bare
// apply, x-bare their ratio; bare-plan-apply-ns/apply and
// x-bare-plan-apply compare with the two tofu steps the reconciler takes
// (it plans with the var file of secrets on disk only for the plan, and
// applies the plan file).
func BenchmarkApplyTenant(b *testing.B) {
	r := newRig(b)
	r.reconcile(b, 0, 0) // secrets, server groups, init
	low, err := os.ReadFile(filepath.Join(r.workDir(), render.MainFile))
	if err != nil {
		b.Fatal(err)
	}
	vars := r.varFile(b)
	var high []byte
	var rec, bare, bare2 []time.Duration
	b.ResetTimer()
	for range b.N {
		for range rounds {
			rec = append(rec, r.reconcile(b, 3, 5))
			if high == nil {
				high, _ = os.ReadFile(filepath.Join(r.workDir(), render.MainFile))
			}
			r.bareApply(b, low, vars, false)
			bare = append(bare, r.bareApply(b, high, vars, false))
			r.bareApply(b, low, vars, false)
			bare2 = append(bare2, r.bareApply(b, high, vars, true))
			r.reconcile(b, 0, 0)
		}
	}
	b.StopTimer()
	mr, mb, mp := median(rec), median(bare), median(bare2)
	ratio := float64(mr) / float64(mb)
	b.ReportMetric(float64(mr.Nanoseconds()), "rec-ns/apply")
	b.ReportMetric(float64(mb.Nanoseconds()), "bare-ns/apply")
	b.ReportMetric(float64(mp.Nanoseconds()), "bare-plan-apply-ns/apply")
	b.ReportMetric(ratio, "x-bare")
	b.ReportMetric(float64(mr)/float64(mp), "x-bare-plan-apply")
	b.Logf("apply of 3+5 machines on the simulated OpenStack: reconcile %v, bare tofu apply %v, bare plan -out + apply %v (medians of %d): %.2f× and %.2f× (target ≤ %.1f× a bare apply)",
		mr.Round(time.Millisecond), mb.Round(time.Millisecond), mp.Round(time.Millisecond), len(rec), ratio, float64(mr)/float64(mp), target)
	b.Logf("all reconciles %v; all bare applies %v; all bare plan+apply %v", rec, bare, bare2)
	if ratio > target {
		b.Errorf("the reconciler's apply takes %.2f× a bare tofu apply, want ≤ %.1f×", ratio, target)
	}
}

var rounds = 5

func median(xs []time.Duration) time.Duration {
	xs = append([]time.Duration(nil), xs...)
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
