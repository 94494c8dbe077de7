package metrics

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scrape records a little into m and returns the sample lines its
// handler serves over HTTP, by metric name.
func scrape(t *testing.T, m *Metrics) map[string][]string {
	t.Helper()
	m.Tofu("apply", 1.5, nil)
	m.Tofu("plan", 0.5, errors.New("exit status 1"))
	m.Applied("production", "0123abcd")
	m.Reconciled("succeeded", 3)
	m.Drifted("production", 0)
	m.GaugeFunc("rezuscloud_queue_depth", "Tenant runs waiting for a worker.", func() float64 { return 2 })
	m.CounterFunc("rezuscloud_tofu_processes_total", "tofu processes started.", func() float64 { return 7 })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	samples := map[string][]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		samples[name] = append(samples[name], line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return samples
}

// TestReplicaLabel: every sample a replica serves, the Go and process
// collectors' and the scrape's own included, carries replica="NAME"; a
// server that runs alone serves none with the label.
func TestReplicaLabel(t *testing.T) {
	m, err := NewReplica("rc-a")
	if err != nil {
		t.Fatal(err)
	}
	samples := scrape(t, m)
	for _, name := range []string{"rezuscloud_tofu_runs_total", "rezuscloud_tenant_applied_revision_info", "rezuscloud_queue_depth",
		"rezuscloud_tofu_processes_total", "rezuscloud_reconcile_duration_seconds_bucket", "go_goroutines", "promhttp_metric_handler_errors_total"} {
		if len(samples[name]) == 0 {
			t.Errorf("no sample of %s", name)
		}
	}
	for name, lines := range samples {
		for _, line := range lines {
			if !strings.Contains(line, `replica="rc-a"`) {
				t.Errorf("%s: sample without the replica label: %s", name, line)
			}
		}
	}
	if want := `rezuscloud_tenant_applied_revision_info{replica="rc-a",revision="0123abcd",tenant="production"} 1`; !contains(samples, want) {
		t.Errorf("no sample %s", want)
	}

	for name, lines := range scrape(t, New()) {
		for _, line := range lines {
			if strings.Contains(line, "replica=") {
				t.Errorf("%s: a server that runs alone labels a sample with a replica: %s", name, line)
			}
		}
	}
	alone, err := NewReplica("")
	if err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, alone); len(got["go_goroutines"]) != 1 || contains(got, "replica=") {
		t.Errorf(`NewReplica(""): %v, want the metrics of a server that runs alone`, got["go_goroutines"])
	}
	if _, err := NewReplica("rc-\xff"); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("a replica name that is not UTF-8: %v", err)
	}
}

// contains reports whether a sample line holds s.
func contains(samples map[string][]string, s string) bool {
	for _, lines := range samples {
		for _, line := range lines {
			if strings.Contains(line, s) {
				return true
			}
		}
	}
	return false
}
