package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

const backupID = "20261205T080000Z-1a2b3c4d"

// backupRig is a real server with a backup store of servertest.Backups:
// tenant production declares backups and has two, staging declares none.
// It returns the server's URL and a token file per role.
func backupRig(t *testing.T) (*backend.Server, *servertest.Backups, map[string]string) {
	t.Helper()
	isolate(t)
	file, tokens := servertest.Tokens(t, map[string]string{"viewer": "view", "editor": "edit", "admin": "admin"})
	srv := servertest.StartBackend(t, backend.Config{TokensFile: file}, nil)
	files := map[string]string{}
	for name, tok := range tokens {
		files[name] = filepath.Join(t.TempDir(), name+".token")
		if err := os.WriteFile(files[name], []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	prod := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "production"},
		Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", Backup: &schema.BackupPolicy{Interval: "6h", Keep: 14}},
		Status: schema.TenantStatus{Phase: schema.TenantActive, Backup: &schema.BackupStatus{Declared: true, LastSuccess: now.Add(-2 * time.Hour),
			LastAttempt: now.Add(-2 * time.Hour), Next: now.Add(4 * time.Hour), Count: 2, SizeBytes: 3 << 20, LastID: backupID}}}
	staging := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "staging"},
		Spec:   schema.TenantSpec{KubernetesVersion: "1.34.1"},
		Status: schema.TenantStatus{Phase: schema.TenantActive, Backup: &schema.BackupStatus{Declared: false}}}
	putTenants(t, srv, prod, staging)
	b := &servertest.Backups{}
	b.Add(schema.BackupInfo{ID: "20261205T020000Z-0a0b0c0d", Tenant: "production", Time: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), Machine: "production-cp-0",
		Reason: "scheduled", Commit: "3f2a9c1e0b7d5a6c", SizeBytes: 1536, Etcd: schema.BackupEtcd{RaftIndex: 41, DBSizeBytes: 1 << 20}, TalosVersion: "1.12.6"},
		schema.BackupInfo{ID: backupID, Tenant: "production", Time: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), Machine: "production-cp-1",
			Reason: "requested by editor", SizeBytes: 3 << 20})
	srv.ServeBackups(b, nil)
	t.Setenv(envServer, srv.URL())
	return srv, b, files
}

func putTenants(t *testing.T, srv *backend.Server, ts ...*schema.Tenant) {
	t.Helper()
	err := srv.Store().Update(func(tx store.Tx) error {
		for _, tn := range ts {
			if _, err := tx.PutObject(schema.KindTenant, tn.Metadata.Name, tn); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGetBackups(t *testing.T) {
	_, _, tokens := backupRig(t)
	code, out, errOut := runCLI(t, "get", "backups", "-t", "production", "--token-file", tokens["viewer"])
	if code != 0 || errOut != "" {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	want := `ID                          TIME                   MACHINE           SIZE      REASON                COMMIT
20261205T020000Z-0a0b0c0d   2026-12-05T02:00:00Z   production-cp-0   1.5 KiB   scheduled             3f2a9c1e0b7d
20261205T080000Z-1a2b3c4d   2026-12-05T08:00:00Z   production-cp-1   3.0 MiB   requested by editor   <none>
`
	if out != want {
		t.Errorf("get backups:\n%s\nwant\n%s", out, want)
	}
	code, out, _ = runCLI(t, "get", "backup", backupID, "-t", "production", "-o", "json", "--token-file", tokens["viewer"])
	var l struct {
		Items []schema.BackupInfo `json:"items"`
		Total int                 `json:"total"`
	}
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Total != 1 || l.Items[0].ID != backupID || l.Items[0].Machine != "production-cp-1" {
		t.Errorf("get backup ID -o json: code %d, %v:\n%s", code, err, out)
	}
	code, out, _ = runCLI(t, "get", "backups", "-t", "production", "-o", "name", "--token-file", tokens["viewer"])
	if code != 0 || out != "backup/production/20261205T020000Z-0a0b0c0d\nbackup/production/"+backupID+"\n" {
		t.Errorf("-o name: code %d:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "get", "backups", "-t", "production", "-o", "wide", "--token-file", tokens["viewer"])
	if code != 0 || !matches(`(?m)^ID +TIME +MACHINE +SIZE +REASON +COMMIT +ETCD REVISION +ETCD DB +TALOS +KUBERNETES$`, out) ||
		!matches(`(?m)^20261205T020000Z-0a0b0c0d +.* +3f2a9c1e0b7d +41 +1\.0 MiB +1\.12\.6 +<none>$`, out) {
		t.Errorf("-o wide: code %d:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"get", "backups"}, 2, "error: backups belong to a tenant: give --tenant/-t TENANT\n"},
		{[]string{"get", "backups", "-t", "staging"}, 0, "No backups of tenant staging.\n"},
		{[]string{"get", "backups", "-t", "nope"}, 1, `error: tenant "nope" not found` + "\n"},
		{[]string{"get", "backups", "-t", "production", "20261205T090000Z-00000000"}, 1, `error: backup "20261205T090000Z-00000000" of tenant production not found` + "\n"},
	} {
		code, _, errOut := runCLI(t, append(tc.args, "--token-file", tokens["viewer"])...)
		if code != tc.code || errOut != tc.err {
			t.Errorf("%v: code %d stderr %q, want %d %q", tc.args, code, errOut, tc.code, tc.err)
		}
	}
}

// TestBackupRequest: rezusctl backup asks for a backup as its token's
// name; --wait waits until the tenant's status shows a new one.
func TestBackupRequest(t *testing.T) {
	srv, b, tokens := backupRig(t)
	code, out, errOut := runCLI(t, "backup", "production", "--token-file", tokens["editor"])
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "► production: a backup of tenant production is queued") {
		t.Fatalf("backup: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "backup", "production", "--token-file", tokens["viewer"])
	if code != 2 || !strings.Contains(errOut, "(403)") || !strings.Contains(errOut, "requesting a backup needs edit") {
		t.Errorf("backup as view: code %d stderr %q", code, errOut)
	}
	// The backup worker writes one a little later.
	b.OnRequest = func(tenant, _ string) {
		go func() {
			var tn schema.Tenant
			srv.Store().View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, tenant, &tn) })
			st := *tn.Status.Backup
			st.LastAttempt, st.LastSuccess, st.LastID, st.Count, st.SizeBytes = time.Now(), time.Now(), "20261205T083000Z-5e6f7a8b", 3, 5<<20
			tn.Status.Backup = &st
			err := srv.Store().Update(func(tx store.Tx) error {
				_, err := tx.PutObject(schema.KindTenant, tenant, &tn)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	code, out, errOut = runCLI(t, "backup", "production", "--wait", "--token-file", tokens["editor"])
	if code != 0 || errOut != "" || !strings.HasSuffix(out, "✔ production: backup 20261205T083000Z-5e6f7a8b written (5.0 MiB)\n") {
		t.Errorf("backup --wait: code %d stdout %q stderr %q", code, out, errOut)
	}
	if got := strings.Join(b.Requested(), ","); got != "production by editor,production by editor" {
		t.Errorf("requested %q", got)
	}
}

func TestBackupOutcome(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	was := schema.BackupStatus{LastSuccess: t0, LastAttempt: t0.Add(time.Hour), LastError: "store refused the write", LastID: "a"}
	for _, tc := range []struct {
		now       *schema.BackupStatus
		done, bad bool
	}{
		{nil, false, false},
		{&was, false, false},
		{&schema.BackupStatus{LastSuccess: t0.Add(2 * time.Hour), LastAttempt: t0.Add(2 * time.Hour), LastID: "b"}, true, false},
		// The attempt under way still shows the error of the one before.
		{&schema.BackupStatus{LastSuccess: t0, LastAttempt: t0.Add(2 * time.Hour), LastError: "store refused the write", LastID: "a"}, false, false},
		{&schema.BackupStatus{LastSuccess: t0, LastAttempt: t0.Add(2 * time.Hour), LastError: "snapshot stream stopped moving", LastID: "a"}, true, true},
	} {
		done, err := backupOutcome(was, tc.now)
		if done != tc.done || (err != nil) != tc.bad {
			t.Errorf("backupOutcome(%+v) = %v, %v; want %v, failed %v", tc.now, done, err, tc.done, tc.bad)
		}
	}
}

// TestBackupDownload: an admin downloads a backup into a file of mode
// 0600, which is not overwritten without --force; others may not.
func TestBackupDownload(t *testing.T) {
	_, _, tokens := backupRig(t)
	file := filepath.Join(t.TempDir(), "production.tar")
	code, out, errOut := runCLI(t, "backup", "download", "production", backupID, "-o", file, "--token-file", tokens["admin"])
	if code != 0 || out != "" || !strings.HasPrefix(errOut, "wrote backup "+backupID+" of tenant production to "+file+" (") {
		t.Fatalf("download: code %d stdout %q stderr %q", code, out, errOut)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file %v, %v: want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(file)
	checkTar(t, b)

	code, _, errOut = runCLI(t, "backup", "download", "production", backupID, "-o", file, "--token-file", tokens["admin"])
	if code != 2 || errOut != "error: "+file+" exists; give --force to overwrite it\n" {
		t.Errorf("download over a file: code %d stderr %q", code, errOut)
	}
	if code, _, errOut = runCLI(t, "backup", "download", "production", backupID, "-o", file, "--force", "--token-file", tokens["admin"]); code != 0 {
		t.Errorf("download --force: code %d stderr %q", code, errOut)
	}
	code, out, _ = runCLI(t, "backup", "download", "production", backupID, "-o", "-", "--token-file", tokens["admin"])
	if code != 0 {
		t.Fatalf("download to stdout: code %d", code)
	}
	checkTar(t, []byte(out))

	other := filepath.Join(t.TempDir(), "x.tar")
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"backup", "download", "production", backupID, "-o", other, "--token-file", tokens["editor"]}, 2, "downloading a backup needs admin"},
		{[]string{"backup", "download", "production", "20261205T090000Z-00000000", "-o", other, "--token-file", tokens["admin"]}, 1, "not found"},
		{[]string{"backup", "download", "production", "latest", "-o", other, "--token-file", tokens["admin"]}, 2, `"latest" is not a backup ID`},
		{[]string{"backup", "download", "production", backupID, "--token-file", tokens["admin"]}, 2, "give -o FILE"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: code %d stderr %q, want %d and %q", tc.args[2:4], code, errOut, tc.code, tc.err)
		}
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a refused download left a file")
	}
	if names, _ := filepath.Glob(filepath.Join(filepath.Dir(other), "*")); len(names) != 0 {
		t.Errorf("refused downloads left %v", names)
	}
}

func checkTar(t *testing.T, b []byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for _, name := range servertest.BackupObjects {
		h, err := tr.Next()
		if err != nil || h.Name != "production/"+backupID+"/"+name {
			t.Fatalf("tar entry %v, %v; want %s", h, err, name)
		}
		body, _ := io.ReadAll(tr)
		if string(body) != servertest.Object("production", backupID, name) {
			t.Errorf("%s holds %q", name, body)
		}
	}
}

// TestTenantsShowBackups: get tenants has a BACKUP column, and describe
// tenant the policy and where the backups stand; a tenant without
// spec.backup says "no etcd backup".
func TestTenantsShowBackups(t *testing.T) {
	_, _, tokens := backupRig(t)
	code, out, errOut := runCLI(t, "get", "tenants", "--token-file", tokens["viewer"])
	if code != 0 || errOut != "" {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	for _, re := range []string{`(?m)^NAME +PHASE +MACHINES +VERSION +AGE +READY +BACKUP +STATUS$`,
		`(?m)^production +active +0/0 +1\.34\.1 +\S+ +Unknown +120m ago, 2 kept +<none>$`,
		`(?m)^staging +active +0/0 +1\.34\.1 +\S+ +Unknown +no etcd backup +<none>$`} {
		if !matches(re, out) {
			t.Errorf("get tenants lacks %s:\n%s", re, out)
		}
	}
	code, out, _ = runCLI(t, "describe", "tenant", "production", "--token-file", tokens["viewer"])
	for _, re := range []string{`(?m)^  Backup: +every 6h, keep 14$`, `(?m)^  Backup:$`, `(?m)^    Last Success: +\S+ \(120m ago\)$`,
		`(?m)^    Next: +\S+ \(in 3h59m\)$`, `(?m)^    Count: +2$`, `(?m)^    Last: +` + backupID + ` \(3\.0 MiB\)$`, `(?m)^    Last Error: +<none>$`} {
		if code != 0 || !matches(re, out) {
			t.Errorf("describe tenant production lacks %s:\n%s", re, out)
		}
	}
	code, out, _ = runCLI(t, "describe", "tenant", "staging", "--token-file", tokens["viewer"])
	if code != 0 || !matches(`(?m)^  Backup: +<none>\n`, out) || !matches(`(?m)^  Backup: +no etcd backup$`, out) {
		t.Errorf("describe tenant staging:\n%s", out)
	}
}

func matches(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
