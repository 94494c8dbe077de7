package ui

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// withBackups is the filled rig whose production declares backups every
// 6h, with two of them in the server's backup store, a failed attempt
// since the last success and a restore under way.
func withBackups(t *testing.T, o rigOptions) (*rig, *servertest.Backups) {
	r := filled(t, o)
	objs := fleet("production", 3, 2)
	tn := objs[0].(*schema.Tenant)
	tn.Spec.Backup = &schema.BackupPolicy{Interval: "6h", Keep: 14}
	tn.Status.Backup = &schema.BackupStatus{Declared: true, LastSuccess: testNow.Add(-2 * time.Hour), LastAttempt: testNow.Add(-10 * time.Minute),
		LastError: "snapshot of production-controlplane-0: the stream stopped moving for 30s", Next: testNow.Add(4 * time.Hour),
		Count: 2, SizeBytes: 3 << 20, LastID: "20261130T100000Z-1a2b3c4d",
		Restore: &schema.RestoreStatus{Backup: "20261130T040000Z-0a0b0c0d", Phase: "recovering", StartedAt: testNow.Add(-time.Minute)}}
	tn.Status.Conditions = schema.Conditions{{Type: schema.ConditionReady, Status: schema.ConditionTrue, Reason: schema.ReasonApplied},
		{Type: schema.ConditionBackupFailed, Status: schema.ConditionTrue, Reason: schema.ReasonBackupFailed, Message: "the stream stopped moving"}}
	r.put(objs...)
	b := &servertest.Backups{}
	b.Add(schema.BackupInfo{ID: "20261130T040000Z-0a0b0c0d", Tenant: "production", Time: testNow.Add(-8 * time.Hour), Machine: "production-controlplane-0",
		Reason: "scheduled", Commit: sha(1), SizeBytes: 1536},
		schema.BackupInfo{ID: "20261130T100000Z-1a2b3c4d", Tenant: "production", Time: testNow.Add(-2 * time.Hour), Machine: "production-controlplane-1",
			Reason: "before the upgrade to Talos 1.13.0", SizeBytes: 3 << 20})
	r.srv.ServeBackups(b, nil)
	return r, b
}

// TestTenantPageBackups: the tenant page shows where its backups stand
// (last success, last error, next, count, size, a restore) and lists the
// backups, newest first, metadata only; admins get download links.
func TestTenantPageBackups(t *testing.T) {
	r, _ := withBackups(t, rigOptions{})
	page := body(t, r.do("GET", "/tenants/production", nil, ""), 200)
	contains(t, "tenant page", page, `<section data-part="backups" data-kinds="Tenant">`, "<h2>Backups <small>2</small></h2>",
		"<dt>Policy</dt><dd>every 6h, keep 14</dd>",
		`<dt>Last success</dt><dd><time datetime="2026-11-30T10:00:00Z" title="2026-11-30 10:00:00 UTC" data-age>2h ago</time> · <code>20261130T100000Z-1a2b3c4d</code> · 3.0 MiB</dd>`,
		`<div class="error wrap" data-backup-error>snapshot of production-controlplane-0: the stream stopped moving for 30s</div>`,
		`<dt>Next</dt><dd><time datetime="2026-11-30T16:00:00Z" title="2026-11-30 16:00:00 UTC" data-age>in 4h</time></dd>`,
		`from <code>20261130T040000Z-0a0b0c0d</code>: <span class="badge phase-busy">recovering</span>`,
		`<tr data-backup-id="20261130T100000Z-1a2b3c4d"><td><code>20261130T100000Z-1a2b3c4d</code></td>`,
		"before the upgrade to Talos 1.13.0", "1.5 KiB", `<a href="/commits/`+sha(1)+`"><code>`+sha(1)[:12]+`</code></a>`,
		`<a href="/api/v1/tenants/production/backups/20261130T100000Z-1a2b3c4d/download" download>download</a>`,
		`<span class="badge cond-bad" title="BackupFailed: the stream stopped moving">backup failed</span>`)
	if i, j := strings.Index(page, `data-backup-id="20261130T100000Z`), strings.Index(page, `data-backup-id="20261130T040000Z`); i < 0 || j < 0 || i > j {
		t.Errorf("backups out of order: the newest must come first")
	}
	if strings.Contains(page, "no etcd backup") {
		t.Error("a tenant that declares backups is flagged as having none")
	}
	// The live part alone, as the script fetches it.
	frag := body(t, r.do("GET", "/tenants/production?part=backups", nil, ""), 200)
	contains(t, "backups part", frag, `data-backup-id="20261130T040000Z-0a0b0c0d"`)
}

// TestTenantPageBackupsForViewers: a view session sees the list without
// download links.
func TestTenantPageBackupsForViewers(t *testing.T) {
	r, _ := withBackups(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}})
	page := body(t, r.do("GET", "/tenants/production", cookieHeader(r.login(t, "secret-viewer")), ""), 200)
	contains(t, "tenant page", page, `data-backup-id="20261130T100000Z-1a2b3c4d"`)
	if strings.Contains(page, "/download") {
		t.Error("a view session gets a download link")
	}
}

// TestNoEtcdBackup: a tenant that declares no backups says so on the
// overview and on its page.
func TestNoEtcdBackup(t *testing.T) {
	r, _ := withBackups(t, rigOptions{})
	objs := fleet("bare", 1, 1)
	objs[0].(*schema.Tenant).Status.Backup = &schema.BackupStatus{Declared: false}
	r.put(objs...)
	badge := `<span class="badge cond-idle" title="spec.backup is not declared: nothing keeps a copy of this cluster&#39;s etcd">no etcd backup</span>`
	overview := body(t, r.do("GET", "/", nil, ""), 200)
	// bare and staging declare none; production does.
	if n := strings.Count(overview, badge); n != 2 {
		t.Errorf("the overview flags %d tenants with no etcd backup, want 2 (bare, staging)", n)
	}
	row := overview[strings.Index(overview, `href="/tenants/bare"`):]
	row = row[:strings.Index(row, "</tr>")]
	contains(t, "bare's row", row, badge)
	page := body(t, r.do("GET", "/tenants/bare", nil, ""), 200)
	contains(t, "tenant page", page, badge, "declares no <code>spec.backup</code>")
	if strings.Contains(page, "data-backup-id") || strings.Contains(page, "<dt>Last success</dt>") {
		t.Error("a tenant without backups shows backup facts")
	}
}

// failingBackups is a backup store that cannot be listed.
type failingBackups struct{ servertest.Backups }

func (*failingBackups) ListBackups(context.Context, string) ([]schema.BackupInfo, error) {
	return nil, errors.New("list s3://backups/production/: access denied for key AKIAEXAMPLE")
}

// TestTenantPageBackupStoreFails: a backup store that cannot be listed
// costs the page its list only, and the reason stays in the log.
func TestTenantPageBackupStoreFails(t *testing.T) {
	r, _ := withBackups(t, rigOptions{})
	r.srv.ServeBackups(&failingBackups{}, nil)
	page := body(t, r.do("GET", "/tenants/production", nil, ""), 200)
	contains(t, "tenant page", page, "The backup store could not be listed; the server log has the details.", "<dt>Policy</dt>")
	if strings.Contains(page, "AKIA") || strings.Contains(page, "s3://") {
		t.Error("the page repeats the store's error")
	}
	// Without a backup store, there is no list and no complaint.
	r.srv.ServeBackups(nil, nil)
	page = body(t, r.do("GET", "/tenants/production", nil, ""), 200)
	if strings.Contains(page, "backup store") || strings.Contains(page, "data-backup-id") {
		t.Error("a server without a backup store shows a list or a problem")
	}
	contains(t, "tenant page", page, "<dt>Policy</dt><dd>every 6h, keep 14</dd>")
}

// countingBackups counts the listings of its backups.
type countingBackups struct {
	*servertest.Backups
	n atomic.Int32
}

func (c *countingBackups) ListBackups(ctx context.Context, tenant string) ([]schema.BackupInfo, error) {
	c.n.Add(1)
	return c.Backups.ListBackups(ctx, tenant)
}

// TestTenantPageBackupsListedOnce: the live page's parts, fetched again
// whenever the tenant changes, list the backup store again only when the
// tenant's status.backup moved (a new backup, a pruned one).
func TestTenantPageBackupsListedOnce(t *testing.T) {
	r, b := withBackups(t, rigOptions{})
	c := &countingBackups{Backups: b}
	r.srv.ServeBackups(c, nil)
	for range 3 {
		body(t, r.do("GET", "/tenants/production?part=status,backups", nil, ""), 200)
	}
	body(t, r.do("GET", "/tenants/production?part=status,machines", nil, ""), 200)
	if n := c.n.Load(); n != 1 {
		t.Errorf("the store was listed %d times for an unchanged status.backup, want once", n)
	}
	objs := fleet("production", 3, 2)
	tn := objs[0].(*schema.Tenant)
	tn.Spec.Backup = &schema.BackupPolicy{Interval: "6h", Keep: 14}
	tn.Status.Backup = &schema.BackupStatus{Declared: true, LastSuccess: testNow, LastAttempt: testNow, Count: 3, LastID: "20261130T120000Z-2b3c4d5e"}
	r.put(objs...)
	b.Add(schema.BackupInfo{ID: "20261130T120000Z-2b3c4d5e", Tenant: "production", Time: testNow, Machine: "production-controlplane-2", SizeBytes: 4096})
	frag := body(t, r.do("GET", "/tenants/production?part=backups", nil, ""), 200)
	contains(t, "backups part", frag, `data-backup-id="20261130T120000Z-2b3c4d5e"`)
	if n := c.n.Load(); n != 2 {
		t.Errorf("the store was listed %d times, want twice: once more after a new backup", n)
	}
}
