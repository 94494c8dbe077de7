package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// historyRig is a real server whose tenant shop has two machines and the
// history of a reboot of its control plane an hour ago, as the server
// records it.
func historyRig(t *testing.T) time.Time {
	t.Helper()
	isolate(t)
	srv := servertest.StartBackend(t, backend.Config{}, nil)
	t.Setenv(envServer, srv.URL())
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	up := schema.MachineTransition{At: at.Add(-2 * time.Hour), Stage: schema.StageReady, Ready: true, Connected: true, ConfigUpToDate: true}
	err := srv.Store().Update(func(tx store.Tx) error {
		tn := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "shop"}}
		if _, err := tx.PutObject(schema.KindTenant, "shop", tn); err != nil {
			return err
		}
		for _, name := range []string{"shop-cp-0", "shop-w-0"} {
			m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelTenant: "shop"}}, Spec: schema.MachineSpec{Tenant: "shop"}}
			if _, err := tx.PutObject(schema.KindMachine, name, m); err != nil {
				return err
			}
		}
		steps := []error{
			history.RecordTransition(tx, "shop", "shop-cp-0", up),
			history.RecordTransition(tx, "shop", "shop-w-0", up),
			history.RecordAvailability(tx, "shop", schema.TenantAvailability{At: up.At, Ready: 2, Desired: 2, APIReady: true}),
			history.RecordMark(tx, "shop", schema.HistoryMark{At: at, Kind: schema.MarkReboot, Machine: "shop-cp-0"}),
			history.RecordTransition(tx, "shop", "shop-cp-0", schema.MachineTransition{At: at, Stage: schema.StageRestarting}),
			history.RecordAvailability(tx, "shop", schema.TenantAvailability{At: at, Ready: 1, Desired: 2}),
			history.RecordTransition(tx, "shop", "shop-cp-0", schema.MachineTransition{At: at.Add(time.Minute), Stage: schema.StageReady, Ready: true, Connected: true, ConfigUpToDate: true}),
			history.RecordAvailability(tx, "shop", schema.TenantAvailability{At: at.Add(time.Minute), Ready: 2, Desired: 2, APIReady: true}),
		}
		for i := range 3 {
			s := schema.MachineSample{Load1: 0.5 * float64(i+1), MemoryUsedBytes: uint64(i+2) << 30, MemoryTotalBytes: 8 << 30, EtcdDBSizeBytes: 40 << 20, EtcdLeader: true}
			steps = append(steps, history.RecordSamples(tx, "shop", at.Add(time.Duration(i+2)*time.Minute), map[string]schema.MachineSample{"shop-cp-0": s}))
		}
		for _, err := range steps {
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestGetHistory: get history TENANT prints the tenant's events in time
// order (availability, each machine's transitions, the reboot); get
// history TENANT MACHINE the machine's transitions and its samples summed
// up, listed with -o wide, resampled with --step; -o json the history as
// the API serves it; bad flags and unknown names are clear errors.
func TestGetHistory(t *testing.T) {
	at := historyRig(t)
	ts := func(d time.Duration) string { return at.Add(d).Format(time.RFC3339) }
	code, out, errOut := runCLI(t, "get", "history", "shop")
	if code != 0 {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	for _, re := range []string{
		`(?m)^TIME +MACHINE +EVENT$`,
		`(?m)^` + ts(-2*time.Hour) + ` +<none> +available 2/2, API answers$`,
		`(?m)^` + ts(-2*time.Hour) + ` +shop-cp-0 +ready$`,
		`(?m)^` + ts(0) + ` +shop-cp-0 +reboot$`,
		`(?m)^` + ts(0) + ` +shop-cp-0 +restarting, no answer, not ready$`,
		`(?m)^` + ts(0) + ` +<none> +available 1/2, API does not answer$`,
		`(?m)^` + ts(time.Minute) + ` +shop-cp-0 +ready$`,
	} {
		if !matches(re, out) {
			t.Errorf("get history shop lacks %s:\n%s", re, out)
		}
	}
	if i, j := strings.Index(out, ts(-2*time.Hour)), strings.Index(out, ts(time.Minute)); i < 0 || j < i {
		t.Errorf("the events are not in time order:\n%s", out)
	}

	code, out, _ = runCLI(t, "get", "history", "shop", "shop-cp-0")
	for _, re := range []string{`(?m)^TIME +STAGE +READY +CONNECTED +CONFIG$`, `(?m)^` + ts(0) + ` +restarting +false +false +unknown$`,
		`(?m)^3 samples every 1m0s: load 1\.50 now, 1\.50 at most; memory 4\.0 GiB of 8\.0 GiB now, 4\.0 GiB at most; etcd DB 40 MiB now, 40 MiB at most \(-o wide lists them\)\.$`} {
		if code != 0 || !matches(re, out) {
			t.Errorf("get history shop shop-cp-0 lacks %s:\n%s", re, out)
		}
	}
	code, out, _ = runCLI(t, "get", "history", "-t", "shop", "shop-cp-0", "-o", "wide")
	if code != 0 || !matches(`(?m)^TIME +LOAD1 +MEMORY +ETCD DB +LEADER$`, out) || !matches(`(?m)^`+ts(3*time.Minute)+` +1\.00 +3\.0 GiB/8\.0 GiB +40 MiB +true$`, out) {
		t.Errorf("get history -o wide:\n%s", out)
	}
	code, out, _ = runCLI(t, "get", "history", "shop", "shop-cp-0", "--since", "90m", "--step", "1h", "-o", "json")
	var mh schema.MachineHistory
	if err := json.Unmarshal([]byte(out), &mh); code != 0 || err != nil || mh.Step != 3600 || len(mh.Samples) != 1 || len(mh.Transitions) != 3 {
		t.Errorf("get history --since 90m --step 1h -o json: code %d, %v, step %d, %d samples, %d transitions:\n%s", code, err, mh.Step, len(mh.Samples), len(mh.Transitions), out)
	}
	code, out, _ = runCLI(t, "get", "history", "shop", "--since", ts(30*time.Second))
	if code != 0 || strings.Contains(out, "reboot") || !matches(`(?m)^`+ts(time.Minute)+` +shop-cp-0 +ready$`, out) {
		t.Errorf("get history --since after the reboot:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", "history"}, exitUsage, "give a tenant"},
		{[]string{"get", "history", "shop", "--since", "yesterday"}, exitUsage, `--since "yesterday": want an RFC 3339 time or a duration`},
		{[]string{"get", "history", "shop", "--step", "1h"}, exitUsage, "--step resamples a machine's samples"},
		{[]string{"get", "machines", "--since", "1h"}, exitUsage, "apply to a history only"},
		{[]string{"get", "history", "nope"}, exitFailed, "not found"},
		{[]string{"get", "history", "shop", "nope"}, exitFailed, "not found"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: code %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}
}
