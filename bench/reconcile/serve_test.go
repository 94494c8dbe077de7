package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// peakRSSTarget is issue 4 §8's bound on the server's peak resident
// memory, in MiB.
const peakRSSTarget = 150

// BenchmarkServePeakRSS measures (c): the peak resident memory (VmHWM) of
// the real `rezuscloud serve` process, built with go build, reconciling a
// --dir of the fleet: the initial apply, a commit that changes no manifest
// (only README.md), and one that changes one tenant's worker count. One op
// is the whole run; peak-RSS-MiB is its VmHWM, and the *-s metrics how
// long each commit took by the server's own Commit timings.
func BenchmarkServePeakRSS(b *testing.B) {
	var last serveRun
	for range b.N {
		last = runServe(b)
	}
	b.ReportMetric(last.peakMiB, "peak-RSS-MiB")
	b.ReportMetric(last.initial.Seconds(), "initial-s")
	b.ReportMetric(last.noChange.Seconds(), "no-change-s")
	b.ReportMetric(last.oneChange.Seconds(), "one-change-s")
	b.Logf("rezuscloud serve with %d tenants: peak RSS %.1f MiB (target < %d MiB), RSS at the end %.1f MiB; commits took %v (initial), %v (no change), %v (one tenant changed)",
		fleetSize, last.peakMiB, peakRSSTarget, last.endMiB, last.initial.Round(time.Millisecond), last.noChange.Round(time.Millisecond), last.oneChange.Round(time.Millisecond))
	b.Logf("RSS at the end: %.1f MiB anonymous, %.1f MiB file-backed (the bbolt mmap, the binary); Go heap in use %.1f MiB of %.1f MiB from the OS",
		last.anonMiB, last.fileMiB, last.goHeapMiB, last.goSysMiB)
	b.Logf("data dir: %s", last.dataDir)
	b.Logf("tofu commands the server ran: %s", last.tofu)
	if last.peakMiB >= peakRSSTarget {
		b.Errorf("peak RSS %.1f MiB, want < %d MiB", last.peakMiB, peakRSSTarget)
	}
}

type serveRun struct {
	peakMiB, endMiB              float64
	anonMiB, fileMiB             float64 // of the RSS at the end
	goHeapMiB, goSysMiB          float64 // the Go runtime's view at the end
	dataDir                      string  // MiB of each entry of the data dir
	initial, noChange, oneChange time.Duration
	// tofu is the server's own account of its tofu commands, from
	// /metrics: command, runs and seconds.
	tofu string
}

// runServe starts the server on a fresh data dir and repository, takes it
// through the three commits and returns what it measured.
func runServe(b *testing.B) serveRun {
	b.Helper()
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	fleet := baseFleet(fleetSize)
	if err := fleet.WriteDir(repo); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	srv := newServe(b, servertest.Options{Data: filepath.Join(dir, "data"), Dir: repo, SimCloud: true, Args: []string{"--debounce", "0"}})
	srv.Start()

	var out serveRun
	first := srv.waitApplied(b, ctx, "")
	out.initial = first.took
	if first.machines != fleet.Machines() {
		b.Fatalf("after the initial apply the server has %d machines, want %d", first.machines, fleet.Machines())
	}

	readme := filepath.Join(repo, "README.md")
	if err := os.WriteFile(readme, []byte("# Benchmark fleet\n\nA commit that changes no manifest.\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	same := srv.waitApplied(b, ctx, first.revision)
	out.noChange = same.took
	if same.tofuRuns != first.tofuRuns {
		b.Fatalf("a commit that changes no manifest ran %d tofu processes, want none", same.tofuRuns-first.tofuRuns)
	}

	tenant := changeTenantOf(fleetSize)
	changed := fleet.With(tenant, fleet.WorkersOf(tenant)+1)
	if err := changed.WriteDir(repo); err != nil {
		b.Fatal(err)
	}
	one := srv.waitApplied(b, ctx, same.revision)
	out.oneChange = one.took
	if one.tofuRuns == same.tofuRuns || one.machines != changed.Machines() {
		b.Fatalf("after one tenant gained a worker: %d tofu runs (before %d), %d machines, want %d", one.tofuRuns, same.tofuRuns, one.machines, changed.Machines())
	}

	out.tofu, out.goHeapMiB, out.goSysMiB = srv.scrape(b, ctx)
	out.dataDir = duMiB(filepath.Join(dir, "data"))
	out.peakMiB, out.endMiB = srv.mib("VmHWM"), srv.mib("VmRSS")
	out.anonMiB, out.fileMiB = srv.mib("RssAnon"), srv.mib("RssFile")
	srv.Stop()
	return out
}

// duMiB lists the size of each entry of dir, in MiB.
func duMiB(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, e := range entries {
		var n int64
		_ = filepath.WalkDir(filepath.Join(dir, e.Name()), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
		parts = append(parts, fmt.Sprintf("%s %.1f", e.Name(), float64(n)/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

// serveProc is a running `rezuscloud serve` (see servertest), with what
// the benchmarks read of it.
type serveProc struct{ *servertest.Server }

// newServe prepares the server as o says, with its log in JSON; Start
// runs it.
//
// The server runs with the benchmark's GOGC, GOMEMLIMIT and GODEBUG, when they are
// set, so that a run can measure the server with the runtime tuned.
func newServe(b *testing.B, o servertest.Options) *serveProc {
	b.Helper()
	o.Args = append([]string{"--log-format", "json"}, o.Args...)
	for _, name := range []string{"GOGC", "GOMEMLIMIT", "GODEBUG"} {
		if v, ok := os.LookupEnv(name); ok {
			o.Env = append(o.Env, name+"="+v)
		}
	}
	return &serveProc{servertest.New(b, o)}
}

// mib returns a figure of the server process's memory (see
// servertest.Server.Memory) in MiB.
func (p *serveProc) mib(field string) float64 { return float64(p.Memory(field)) / (1 << 20) }

// mb returns a figure of the server process's memory in MB.
func (p *serveProc) mb(field string) float64 { return float64(p.Memory(field)) / 1e6 }

// applied is the server's state once a revision has been applied.
type applied struct {
	revision string
	tofuRuns int64
	machines int
	took     time.Duration // from receiving the commit to finishing it
}

// waitApplied waits until the server has applied a revision other than
// after, and fails when that commit fails.
func (p *serveProc) waitApplied(b *testing.B, ctx context.Context, after string) applied {
	b.Helper()
	for {
		var st struct {
			Source struct {
				Revision string `json:"Revision"`
			} `json:"source"`
			Reconciler struct {
				LastCommit        string `json:"lastCommit"`
				LastAppliedCommit string `json:"lastAppliedCommit"`
				TofuRuns          int64  `json:"tofuRuns"`
			} `json:"reconciler"`
			Counts struct {
				Machines int `json:"machines"`
			} `json:"counts"`
		}
		err := p.getJSON(ctx, "/api/v1/status", &st)
		rev := st.Source.Revision
		if err == nil && rev != "" && rev != after && st.Reconciler.LastCommit == rev {
			var c schema.Commit
			err = p.getJSON(ctx, "/api/v1/commits/"+strings.ReplaceAll(rev, ":", "-"), &c)
			switch {
			case err != nil:
			case c.Status.Phase == schema.CommitSucceeded && st.Reconciler.LastAppliedCommit == rev:
				t := c.Status.Timings
				return applied{revision: rev, tofuRuns: st.Reconciler.TofuRuns, machines: st.Counts.Machines, took: t.FinishedAt.Sub(t.ReceivedAt)}
			case c.Status.Phase.Done() && c.Status.Phase != schema.CommitSucceeded:
				b.Fatalf("%s\n%s", describe(&c), p.Tail(40))
			}
		}
		select {
		case <-ctx.Done():
			b.Fatalf("no revision after %q was applied in time (last error %v)\n%s", after, err, p.Tail(40))
		case <-p.Done():
			b.Fatalf("rezuscloud serve exited\n%s", p.Tail(40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrape reads the server's /metrics: its tofu commands, summed by command
// as "plan 100 runs 31.2s, ...", and the Go heap in use and the memory the
// Go runtime holds from the OS, in MiB.
func (p *serveProc) scrape(b *testing.B, ctx context.Context) (tofu string, heapMiB, sysMiB float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/metrics", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sums, counts := map[string]string{}, map[string]string{}
	var order []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
			switch name {
			case "go_memstats_heap_inuse_bytes":
				heapMiB = v / (1 << 20)
			case "go_memstats_sys_bytes":
				sysMiB = v / (1 << 20)
			}
		}
		cmd, found := strings.CutPrefix(name, `rezuscloud_tofu_duration_seconds_sum{command="`)
		if ok && found {
			cmd = strings.TrimSuffix(cmd, `"}`)
			sums[cmd] = value
			order = append(order, cmd)
		}
		if cmd, found := strings.CutPrefix(name, `rezuscloud_tofu_duration_seconds_count{command="`); ok && found {
			counts[strings.TrimSuffix(cmd, `"}`)] = value
		}
	}
	var parts []string
	for _, cmd := range order {
		parts = append(parts, fmt.Sprintf("%s %s runs %ss", cmd, counts[cmd], sums[cmd]))
	}
	return strings.Join(parts, ", "), heapMiB, sysMiB
}

func (p *serveProc) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// waitReady polls /readyz until it answers 200 and returns the time since
// start: the server is ready once it has fetched its repository.
func (p *serveProc) waitReady(b *testing.B, ctx context.Context, start time.Time) time.Duration {
	b.Helper()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/readyz", nil)
		if err != nil {
			b.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case <-ctx.Done():
			b.Fatalf("rezuscloud serve never became ready\n%s", p.Tail(40))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
