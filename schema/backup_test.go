package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLoadBackupPolicies: the forms of spec.backup and spec.restore that
// Load accepts, as they arrive in the Tenant.
func TestLoadBackupPolicies(t *testing.T) {
	tenant := func(name, extra string) string {
		return "apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata:\n  name: " + name + "\nspec:\n" +
			"  kubernetesVersion: \"1.34.1\"\n  talosVersion: \"1.12.6\"\n  controlPlaneEndpoint: https://" + name + ".example.internal:6443\n" + extra
	}
	files := map[string]string{
		"a.yaml": tenant("interval", "  backup:\n    interval: 6h\n    keep: 14\n"),
		"b.yaml": tenant("schedule", "  backup:\n    schedule: \"0 3 * * *\"\n    timeZone: Europe/Berlin\n    keep: 1000\n"),
		"c.yaml": tenant("restore", "  backup:\n    schedule: \"@daily\"\n    keep: 1\n  restore:\n    backup: 20261205T083000Z-1a2b3c4d\n"),
		"d.yaml": tenant("none", ""),
	}
	d, err := Load(mapFS(files), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		backup  *BackupPolicy
		restore *RestoreSpec
	}{
		"interval": {&BackupPolicy{Interval: "6h", Keep: 14}, nil},
		"schedule": {&BackupPolicy{Schedule: "0 3 * * *", TimeZone: "Europe/Berlin", Keep: 1000}, nil},
		"restore":  {&BackupPolicy{Schedule: "@daily", Keep: 1}, &RestoreSpec{Backup: "20261205T083000Z-1a2b3c4d"}},
		"none":     {nil, nil},
	}
	for name, w := range want {
		td := d.Tenant(name)
		if td == nil {
			t.Fatalf("no tenant %s", name)
		}
		if diff := cmp.Diff(w.backup, td.Tenant.Spec.Backup); diff != "" {
			t.Errorf("%s: spec.backup (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(w.restore, td.Tenant.Spec.Restore); diff != "" {
			t.Errorf("%s: spec.restore (-want +got):\n%s", name, diff)
		}
	}
}

func TestBackupPolicyNext(t *testing.T) {
	// 08:30 UTC is 09:30 in Berlin (CET).
	after := time.Date(2026, 12, 5, 8, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		p    BackupPolicy
		want time.Time
	}{
		{BackupPolicy{Interval: "6h"}, time.Date(2026, 12, 5, 14, 30, 0, 0, time.UTC)},
		{BackupPolicy{Schedule: "0 3 * * *"}, time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)},
		{BackupPolicy{Schedule: "0 10 * * *", TimeZone: "Europe/Berlin"}, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)},
		{BackupPolicy{Schedule: "@hourly"}, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)},
		{BackupPolicy{Interval: "30s"}, time.Time{}},
		{BackupPolicy{Schedule: "0 25 * * *"}, time.Time{}},
		{BackupPolicy{Schedule: "0 0 30 2 *"}, time.Time{}},
	} {
		got := tc.p.Next(after)
		if !got.Equal(tc.want) {
			t.Errorf("%+v: Next = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestBackupID(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	id := NewBackupID(at, [4]byte{0x1a, 0x2b, 0x3c, 0x4d})
	if id != "20261205T083000Z-1a2b3c4d" {
		t.Fatalf("NewBackupID = %q", id)
	}
	if err := CheckBackupID(id); err != nil {
		t.Errorf("CheckBackupID(%q) = %v", id, err)
	}
	for _, bad := range []string{"", "latest", "20261205T083000Z", "20261205T083000Z-1A2B3C4D", "20261205T083000Z-1a2b3c4d/../x",
		"20261205T250000Z-1a2b3c4d", "../20261205T083000Z-1a2b3c4d"} {
		err := CheckBackupID(bad)
		if err == nil || !strings.Contains(err.Error(), "is not a backup ID") {
			t.Errorf("CheckBackupID(%q) = %v, want an error", bad, err)
		}
	}
}

func TestBackupDeclared(t *testing.T) {
	for _, tc := range []struct {
		spec *BackupPolicy
		st   *BackupStatus
		want bool
	}{
		{nil, nil, false},
		{&BackupPolicy{Interval: "6h", Keep: 1}, nil, true},
		{nil, &BackupStatus{Declared: true}, true},
		{&BackupPolicy{Interval: "6h", Keep: 1}, &BackupStatus{Declared: false}, false},
	} {
		tn := &Tenant{Spec: TenantSpec{Backup: tc.spec}, Status: TenantStatus{Backup: tc.st}}
		if got := tn.BackupDeclared(); got != tc.want {
			t.Errorf("spec %+v status %+v: BackupDeclared = %v, want %v", tc.spec, tc.st, got, tc.want)
		}
	}
}
