package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{45 * time.Second, "45s"},
		{119 * time.Second, "119s"},
		{5*time.Minute + 30*time.Second, "5m30s"},
		{7 * time.Minute, "7m"},
		{90 * time.Minute, "90m"},
		{3*time.Hour + 20*time.Minute, "3h20m"},
		{26 * time.Hour, "26h"},
		{76 * time.Hour, "3d4h"},
		{45 * 24 * time.Hour, "45d"},
		{(2*365 + 30) * 24 * time.Hour, "2y30d"},
		{9 * 365 * 24 * time.Hour, "9y"},
	} {
		if got := humanDuration(tc.d); got != tc.want {
			t.Errorf("humanDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := age(time.Time{}, time.Now()); got != "<unknown>" {
		t.Errorf("age of zero time = %q", got)
	}
}

func TestCommitCells(t *testing.T) {
	c := &schema.Commit{Spec: schema.CommitSpec{SHA: "0123456789abcdef0123", Message: "  Scale workers to five nodes, which is a long line that goes on and on\n\nbody"}}
	c.Status.Tenants = []schema.TenantResult{
		{Tenant: "production", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 6, Machines: schema.PlanCounts{Add: 5}},
			Plane: &schema.PlaneActions{Bootstrap: "production-cp-0"}},
		{Tenant: "staging", Phase: schema.CommitSucceeded},
		{Tenant: "qa", Phase: schema.CommitFailed},
		{Tenant: "dev", Phase: schema.CommitApplying},
		{Tenant: "edge", Phase: schema.CommitSucceeded, Plane: &schema.PlaneActions{Machines: 6, Upgrades: 6}},
		{Tenant: "lab", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Change: 1}},
	}
	if got := commitTenants(c); got != "production machines +5, other +1, bootstrap on production-cp-0; staging ok; qa failed; dev applying; "+
		"edge rollout of 6 machines (6 upgrades); lab +0 ~1 -0" {
		t.Errorf("commitTenants = %q", got)
	}
	if got := firstLine(c.Spec.Message, 30); got != "Scale workers to five nodes..." {
		t.Errorf("firstLine = %q", got)
	}
	if got := shortSHA("sha256:deab5da7b7a170c7", ""); got != "deab5da7b7a1" {
		t.Errorf("shortSHA of a content hash = %q", got)
	}
	invalid := &schema.Commit{Status: schema.CommitStatus{Phase: schema.CommitInvalid, Problems: make([]schema.Problem, 2)}}
	if got := commitTenants(invalid); got != "2 problems" {
		t.Errorf("commitTenants of an invalid commit = %q", got)
	}
}

// TestPrintObjects checks the shapes of get's output formats on objects
// the server would serve.
func TestPrintObjects(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	mk := func(name string, created time.Time) json.RawMessage {
		b, _ := json.Marshal(schema.Machine{
			APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: name, CreatedAt: created},
			Spec:     schema.MachineSpec{Tenant: "acme", NodeGroup: "workers", Role: "worker", ManagementAddress: "127.1.0.1", Hostname: "h-" + name, Shape: "small"},
			Status:   schema.MachineStatus{Stage: schema.StageReady},
		})
		return b
	}
	items := []json.RawMessage{mk("m-1", now.Add(-3*time.Minute)), mk("m-longer-name-2", now.Add(-50*time.Hour))}
	rt, _ := lookupType("m")
	var buf bytes.Buffer
	if err := printObjects(&buf, rt, items, outTable, false, false, now); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME              TENANT    NODEGROUP   ROLE      STAGE     ADDRESS     AGE\n" +
		"m-1               acme      workers     worker    ready     127.1.0.1   3m\n" +
		"m-longer-name-2   acme      workers     worker    ready     127.1.0.1   2d2h\n"
	if buf.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	printObjects(&buf, rt, items, outWide, false, true, now)
	if lines := strings.Split(buf.String(), "\n"); !strings.HasPrefix(lines[0], "m-1") || !strings.Contains(lines[0], "h-m-1") || !strings.Contains(lines[0], "small") {
		t.Errorf("wide without headers:\n%s", buf.String())
	}
	buf.Reset()
	printObjects(&buf, rt, items, outJSON, false, false, now)
	var list struct {
		Items []schema.Machine `json:"items"`
		Total int              `json:"total"`
	}
	if err := json.Unmarshal(buf.Bytes(), &list); err != nil || list.Total != 2 || list.Items[1].Metadata.Name != "m-longer-name-2" {
		t.Errorf("json list: %v\n%s", err, buf.String())
	}
	buf.Reset()
	printObjects(&buf, rt, items[:1], outYAML, true, false, now)
	if !strings.HasPrefix(buf.String(), "apiVersion: rezuscloud.io/v1\nkind: Machine\n") {
		t.Errorf("yaml of one object:\n%s", buf.String())
	}
	buf.Reset()
	printObjects(&buf, rt, items, outName, false, false, now)
	if buf.String() != "machine/m-1\nmachine/m-longer-name-2\n" {
		t.Errorf("names: %q", buf.String())
	}
}

func TestWriteSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kubeconfig")
	if err := writeSecretFile(p, []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(p, []byte("two"), false); err == nil || !strings.Contains(err.Error(), "give --force") {
		t.Errorf("second write without force: %v", err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(p, []byte("three"), true); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "three" || st.Mode().Perm() != 0o600 {
		t.Errorf("after --force: %q mode %v, want three and 0600", b, st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

// TestNodeWord: a machine's Node reads as kubectl prints its status.
func TestNodeWord(t *testing.T) {
	for want, k := range map[string]*schema.MachineKubernetes{
		"<none>":                      nil,
		"Ready":                       {Ready: true, Schedulable: true},
		"NotReady":                    {Schedulable: true},
		"Ready,SchedulingDisabled":    {Ready: true},
		"NotReady,SchedulingDisabled": {},
	} {
		if got := nodeWord(k); got != want {
			t.Errorf("nodeWord(%+v) = %q, want %q", k, got, want)
		}
	}
}
