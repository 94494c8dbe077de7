package test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Backups of the tenants' etcd, end to end: the real server with a
// backup store (a directory, or a real S3 server on loopback), the
// simulated nodes' etcd (a real etcd behind a tenant with a Kubernetes
// API), and restores declared in git.

const backupPassphrase = "backups-e2e-passphrase-3f9a"

// backupArgs are the serve flags of a server whose backups go to store.
func backupArgs(store string, extra ...string) []string {
	return planeArgs(append([]string{"--backup-store", store, "--backup-timeout", "20s"}, extra...)...)
}

// backupEnv gives the server the state passphrase, which the backups'
// key is derived from.
var backupEnv = []string{"REZUSCLOUD_STATE_PASSPHRASE=" + backupPassphrase}

// backups lists a tenant's backups through the API.
func backups(t *testing.T, e *e2e, tenant string) []schema.BackupInfo {
	t.Helper()
	var list struct {
		Items []schema.BackupInfo `json:"items"`
	}
	e.srv.mustGet("/api/v1/tenants/"+tenant+"/backups", &list)
	return list.Items
}

// requestBackup asks for a backup of tenant now and waits until the
// tenant's status shows a new last attempt; it returns the status then.
func requestBackup(t *testing.T, e *e2e, tenant string) schema.BackupStatus {
	t.Helper()
	before := backupStatus(t, e, tenant)
	resp, err := http.Post(e.srv.URL()+"/api/v1/tenants/"+tenant+"/backups", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST backups of %s: %d %s", tenant, resp.StatusCode, b)
	}
	var now schema.BackupStatus
	e.srv.WaitFor("a new backup attempt of "+tenant, func() bool {
		now = backupStatus(t, e, tenant)
		return now.LastAttempt.After(before.LastAttempt)
	})
	return now
}

func backupStatus(t *testing.T, e *e2e, tenant string) schema.BackupStatus {
	t.Helper()
	tn := planeTenant(t, e, tenant)
	if tn.Status.Backup == nil {
		return schema.BackupStatus{}
	}
	return *tn.Status.Backup
}

// grepTree fails if a file under dir holds one of the needles.
func grepTree(t *testing.T, dir string, needles ...string) (files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds %q in plain text", p, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestEtcdBackupAndRestore: a tenant with a Kubernetes API (a real etcd)
// declares backups. The first is taken by itself, encrypted: neither the
// Kubernetes objects nor the TF state's keys are readable in the backup
// store, and backups beyond keep are deleted. After every control plane
// lost its etcd, a commit that sets spec.restore without the trailer
// stalls and names it; with the trailer the cluster comes back with its
// objects, although the server is killed in the middle: the nodes'
// journals show one recovery bootstrap.
func TestEtcdBackupAndRestore(t *testing.T) {
	store := t.TempDir()
	e := newE2E(t, e2eOptions{env: backupEnv, args: backupArgs("file://"+store, "--sim-kube-bin", testenv.KubeBin(t), "--talos-timeout", "60s")})
	addKubeTenant(t, e, "kept", 1, "  backup:\n    interval: 1h\n    keep: 2\n")
	e.srv.waitApplied(e.push("Tenant kept, with a Kubernetes API and backups"))
	planeWaitReady(t, e, "kept")
	waitNodesSeen(t, e, "kept")
	cs := kubeClient(t, e, "kept")

	e.srv.WaitFor("kept's first backup, taken by itself", func() bool {
		return !backupStatus(t, e, "kept").LastSuccess.IsZero()
	})
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	putConfigMap(t, cs, marker)

	var ids []string
	for range 2 {
		st := requestBackup(t, e, "kept")
		if st.LastError != "" {
			t.Fatalf("requested backup failed: %s", st.LastError)
		}
		ids = append(ids, st.LastID)
	}
	list := backups(t, e, "kept")
	if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[1] {
		t.Fatalf("backups %+v, want the newest two (%v): keep is 2", list, ids)
	}
	last := list[1]
	if last.Parts["snapshot"].SHA256 == "" || last.Parts["state"].SHA256 == "" || last.Machine == "" || last.Commit == "" || last.Etcd.DBSizeBytes == 0 {
		t.Fatalf("backup manifest %+v lacks what a restore needs", last)
	}
	if st := backupStatus(t, e, "kept"); st.Count != 2 || !st.Declared || st.Next.IsZero() {
		t.Fatalf("status.backup %+v, want 2 backups and the next one scheduled", st)
	}
	if n := grepTree(t, store, marker, "BEGIN", "-----", `"resources"`, "talos_bundle"); n < 6 {
		t.Fatalf("%d files in the backup store, want the 3 objects of each of 2 backups", n)
	}

	// Every control plane loses its etcd: the objects are gone.
	wipeEtcd(t, e, "kept")
	e.work.Write(e2eManifests+"/kept/tenant.yaml", e.read(e2eManifests+"/kept/tenant.yaml")+"  restore:\n    backup: "+last.ID+"\n")
	sha := e.push("Kept: restore etcd from " + last.ID)
	c := e.srv.WaitCommit(sha)
	if r := e2eResult(t, c, "kept"); !r.Stalled || r.Reason != schema.ReasonRestoreNotAllowed || !strings.Contains(r.Error, "Rezuscloud-Allow-Restore: kept") {
		t.Fatalf("restore without the trailer: stalled=%v %s %q", r.Stalled, r.Reason, r.Error)
	}
	if n := len(recoverBootstraps(t, e, "kept")); n != 0 {
		t.Fatalf("%d recovery bootstraps after a commit without the trailer", n)
	}

	// The worker does not answer: the restore recovers etcd, then waits
	// to restart the worker's kubelet, and the server is killed there.
	var worker string
	for _, m := range e.srv.tenantMachines("kept") {
		if m.Spec.Role != schema.RoleControlPlane {
			worker = m.Metadata.Name
		}
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{worker: {Refuse: true}}); err != nil {
		t.Fatal(err)
	}
	e.work.Write("NOTES.md", "restore kept\n")
	sha = e.push("Kept: restore etcd\n\nRezuscloud-Allow-Restore: kept")
	e.srv.WaitFor("the restore to recover etcd", func() bool {
		return len(recoverBootstraps(t, e, "kept")) > 0
	})
	e.srv.Kill()
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{}); err != nil {
		t.Fatal(err)
	}
	e.srv.Start()
	c = e.srv.waitApplied(sha)
	if r := e2eResult(t, c, "kept"); r.Plane == nil || r.Plane.Restore != last.ID {
		t.Fatalf("restore commit's result %+v, want the restore of %s", r.Plane, last.ID)
	}
	if n := len(recoverBootstraps(t, e, "kept")); n != 1 {
		t.Fatalf("%d recovery bootstraps, want exactly one across the kill", n)
	}
	planeWaitReady(t, e, "kept")
	waitNodesSeen(t, e, "kept")
	e.srv.WaitFor("the ConfigMap to be back", func() bool {
		cm, err := kubeClient(t, e, "kept").CoreV1().ConfigMaps("default").Get(context.Background(), "kept-data", metav1.GetOptions{})
		return err == nil && cm.Data["marker"] == marker
	})
}

// putConfigMap writes the object the restore must bring back.
func putConfigMap(t *testing.T, cs kubernetes.Interface, marker string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept-data", Namespace: "default"}, Data: map[string]string{"marker": marker}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wipeEtcd takes the etcd data of every control plane of tenant, through
// the sim's faults file.
func wipeEtcd(t *testing.T, e *e2e, tenant string) {
	t.Helper()
	var cp string
	for _, m := range e.srv.tenantMachines(tenant) {
		if m.Spec.Role == schema.RoleControlPlane {
			cp = m.Metadata.Name
		}
	}
	sim := e.data + "-sim"
	if err := talosnode.WriteFaults(sim, talosnode.Faults{cp: {WipeEtcd: true}}); err != nil {
		t.Fatal(err)
	}
	e.srv.WaitFor(tenant+"'s etcd to be gone", func() bool {
		tn := planeTenant(t, e, tenant)
		return !tn.Status.APIReady || !tn.Status.ControlPlaneReady
	})
	if err := talosnode.WriteFaults(sim, talosnode.Faults{}); err != nil {
		t.Fatal(err)
	}
}

// recoverBootstraps are the Bootstrap calls with RecoverEtcd that the
// tenant's machines got.
func recoverBootstraps(t *testing.T, e *e2e, tenant string) []planeCall {
	t.Helper()
	var out []planeCall
	for _, c := range planeCalls(t, e, tenant, "Bootstrap") {
		if c.Recover {
			out = append(out, c)
		}
	}
	return out
}

// TestSnapshotBeforeRiskySteps: a tenant that declares backups gets a
// snapshot before a rolling Talos upgrade; while the backup store refuses
// writes, the upgrade waits (BackupFailed is set), and it starts only
// after a snapshot succeeded, which the backup's reason names. A commit
// that replaces its control plane gets one before the apply, which the
// run's output names.
func TestSnapshotBeforeRiskySteps(t *testing.T) {
	store := t.TempDir()
	e := newE2E(t, e2eOptions{env: backupEnv, args: backupArgs("file://"+store, "--retry-base", "500ms", "--retry-max", "2s")})
	e.edit(e2eManifests+"/staging/tenant.yaml", "  plugins:\n", "  backup:\n    schedule: \"0 3 * * *\"\n    timeZone: Europe/Berlin\n    keep: 3\n  plugins:\n")
	e.srv.waitApplied(e.push("Staging: nightly backups"))
	planeWaitReady(t, e, "staging")

	// The store refuses writes: the tenant's folder is a file.
	if err := os.WriteFile(filepath.Join(store, "staging"), []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.edit(e2eManifests+"/staging/tenant.yaml", `talosVersion: "1.12.6"`, `talosVersion: "1.12.7"`)
	e.push("Staging: Talos 1.12.7")
	var first time.Time
	e.srv.WaitFor("two failed snapshots before the upgrade", func() bool {
		tn := planeTenant(t, e, "staging")
		c, bs := tn.Status.Conditions.Get(schema.ConditionBackupFailed), tn.Status.Backup
		if c == nil || c.Status != schema.ConditionTrue || bs == nil {
			return false
		}
		if first.IsZero() {
			first = bs.LastAttempt
		}
		return bs.LastAttempt.After(first)
	})
	if ups := planeCalls(t, e, "staging", "Upgrade"); len(ups) != 0 {
		t.Fatalf("%d upgrades while no snapshot could be taken", len(ups))
	}
	if err := os.Remove(filepath.Join(store, "staging")); err != nil {
		t.Fatal(err)
	}
	e.srv.WaitFor("staging's machines on Talos 1.12.7", func() bool {
		return len(planeCalls(t, e, "staging", "Upgrade")) == 2
	})
	list := backups(t, e, "staging")
	if len(list) == 0 || !strings.Contains(list[len(list)-1].Reason, "before the upgrade of Talos to v1.12.7") {
		t.Fatalf("backups %+v, want one taken before the upgrade", list)
	}
	up := planeCalls(t, e, "staging", "Upgrade")[0]
	if !list[len(list)-1].Time.Before(up.Time) {
		t.Fatalf("the snapshot (%s) was not taken before the first upgrade (%s)", list[len(list)-1].Time, up.Time)
	}
	e.srv.WaitFor("BackupFailed to clear", func() bool {
		return planeTenant(t, e, "staging").Status.Conditions.Get(schema.ConditionBackupFailed) == nil
	})
	planeWaitReady(t, e, "staging")

	// A commit that replaces the control plane takes a snapshot first too.
	e.edit(e2eManifests+"/staging/nodegroups.yaml", "  providerConfig:\n    shape: small\n---", "  providerConfig:\n    shape: small\n    image: talos-custom-1.12.7\n---")
	c := e.srv.waitApplied(e.push("Staging: a custom image for the control plane\n\nRezuscloud-Allow-Replace: staging"))
	r := e2eResult(t, c, "staging")
	list = backups(t, e, "staging")
	last := list[len(list)-1]
	if r.Plan.Destroy != 1 || !strings.Contains(last.Reason, "before the replacement of rezussim_machine.ng_controlplane[0]") || !strings.Contains(r.OutputTail, last.ID) {
		t.Fatalf("replacement of the control plane: plan %+v, last backup %q (%s), output:\n%s", r.Plan, last.Reason, last.ID, r.OutputTail)
	}
}

// TestBackupsToS3: backups go to a real S3 server on loopback. A snapshot
// stream that hangs is cut off, and nothing partial is listed; a tampered
// backup and another tenant's are refused by a restore with a clear
// message, and nothing of the cluster is touched.
func TestBackupsToS3(t *testing.T) {
	s3 := testenv.StartS3(t, "backups")
	keys := t.TempDir()
	for name, v := range map[string]string{"ak": s3.AccessKey, "sk": s3.SecretKey} {
		if err := os.WriteFile(filepath.Join(keys, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := newE2E(t, e2eOptions{env: backupEnv, args: backupArgs("s3://backups/rezus", "--backup-timeout", "5s",
		"--backup-s3-endpoint", s3.Endpoint, "--backup-s3-region", s3.Region, "--backup-s3-path-style", "--backup-s3-insecure",
		"--backup-s3-access-key-file", filepath.Join(keys, "ak"), "--backup-s3-secret-key-file", filepath.Join(keys, "sk"))})
	for _, tenant := range []string{"staging", "production"} {
		e.edit(e2eManifests+"/"+tenant+"/tenant.yaml", "  plugins:\n", "  backup:\n    interval: 1h\n    keep: 5\n  plugins:\n")
	}
	e.srv.waitApplied(e.push("Hourly backups"))
	for _, tenant := range []string{"staging", "production"} {
		planeWaitReady(t, e, tenant)
		e.srv.WaitFor(tenant+"'s first backup", func() bool { return backupStatus(t, e, tenant).Count == 1 })
	}
	good := backups(t, e, "staging")[0]

	// A hanging stream is cut off; nothing partial is listed or left.
	var cp string
	for _, m := range e.srv.tenantMachines("staging") {
		if m.Spec.Role == schema.RoleControlPlane {
			cp = m.Metadata.Name
		}
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{cp: {SnapshotHang: true}}); err != nil {
		t.Fatal(err)
	}
	// The host applies the fault within its poll interval: a backup
	// that starts before that succeeds, and the next one is asked for.
	var st schema.BackupStatus
	for range 5 {
		before := backupStatus(t, e, "staging").Count
		if st = requestBackup(t, e, "staging"); st.LastError != "" {
			if st.Count != before {
				t.Fatalf("a hanging snapshot: count %d after it, want %d", st.Count, before)
			}
			break
		}
	}
	if !strings.Contains(st.LastError, "deadline") && !strings.Contains(st.LastError, "stalled") {
		t.Fatalf("a hanging snapshot: status %+v, want it cut off", st)
	}
	if m := metricsText(t, e); !strings.Contains(m, `rezuscloud_tenant_backup_failed{tenant="staging"} 1`) || !strings.Contains(m, `rezuscloud_etcd_backups_total{result="error"}`) {
		t.Fatalf("the metrics do not show the failed backup:\n%s", m)
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{}); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, b := range backups(t, e, "staging") {
		listed[b.ID] = true
	}
	if len(listed) != st.Count {
		t.Fatalf("%d backups listed, status counts %d", len(listed), st.Count)
	}
	mc, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range s3Keys(t, mc, "rezus/staging/") {
		if id := strings.Split(strings.TrimPrefix(o, "rezus/staging/"), "/")[0]; !listed[id] {
			t.Errorf("object %s is left of a backup that is not listed", o)
		}
	}

	// An admin downloads a backup as a tar of its encrypted objects.
	if names := downloadNames(t, e, "staging", good.ID); strings.Join(names, " ") != good.ID+"/manifest.age "+good.ID+"/snapshot.age "+good.ID+"/state.age" {
		t.Fatalf("download of %s holds %v", good.ID, names)
	}

	// Production's backup copied under staging is refused.
	prod := backups(t, e, "production")[0]
	for _, part := range []string{"snapshot.age", "state.age", "manifest.age"} {
		b := s3Get(t, mc, "rezus/production/"+prod.ID+"/"+part)
		s3Put(t, mc, "rezus/staging/"+prod.ID+"/"+part, b)
	}
	restoreRefused(t, e, prod.ID, "belongs to tenant production")
	// A tampered snapshot is refused.
	key := "rezus/staging/" + good.ID + "/snapshot.age"
	b := s3Get(t, mc, key)
	b[len(b)/2] ^= 0x40
	s3Put(t, mc, key, b)
	restoreRefused(t, e, good.ID, "snapshot")
}

// restoreRefused commits a restore of id into staging, with the trailer,
// and checks that it stalls with want in its message and resets nothing.
func restoreRefused(t *testing.T, e *e2e, id, want string) {
	t.Helper()
	path := e2eManifests + "/staging/tenant.yaml"
	s := e.read(path)
	if i := strings.Index(s, "  restore:\n"); i >= 0 {
		s = s[:i]
	}
	e.work.Write(path, s+"  restore:\n    backup: "+id+"\n")
	c := e.srv.WaitCommit(e.push("Staging: restore " + id + "\n\nRezuscloud-Allow-Restore: staging"))
	r := e2eResult(t, c, "staging")
	if !r.Stalled || r.Reason != schema.ReasonRestoreFailed || !strings.Contains(r.Error, want) {
		t.Fatalf("restore of %s: stalled=%v %s %q, want a refusal naming %q", id, r.Stalled, r.Reason, r.Error, want)
	}
	if resets := planeCalls(t, e, "staging", "Reset"); len(resets) != 0 {
		t.Fatalf("a refused restore reset %d machines", len(resets))
	}
}

// s3Keys lists the keys of the "backups" bucket under prefix.
func s3Keys(t *testing.T, mc *minio.Client, prefix string) []string {
	t.Helper()
	var out []string
	for o := range mc.ListObjects(context.Background(), "backups", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out = append(out, o.Key)
	}
	return out
}

func s3Get(t *testing.T, mc *minio.Client, key string) []byte {
	t.Helper()
	o, err := mc.GetObject(context.Background(), "backups", key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func s3Put(t *testing.T, mc *minio.Client, key string, b []byte) {
	t.Helper()
	if _, err := mc.PutObject(context.Background(), "backups", key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// TestRestoreOnANewServer: the management server is lost with the TF
// state, and the machines are gone. A new server on a new data dir and a
// new simulated cloud, with the same backup store and passphrase, reads a
// commit that restores the tenant's backup: it creates the machines again
// with the backup's secrets bundle (the kubeconfig issued before still
// names the same CA), recovers etcd from the snapshot once, and
// bootstraps no new cluster.
func TestRestoreOnANewServer(t *testing.T) {
	store := t.TempDir()
	e := newE2E(t, e2eOptions{env: backupEnv, args: backupArgs("file://" + store)})
	e.edit(e2eManifests+"/staging/tenant.yaml", "  plugins:\n", "  backup:\n    interval: 6h\n    keep: 3\n  plugins:\n")
	e.srv.waitApplied(e.push("Staging: backups every 6 hours"))
	planeWaitReady(t, e, "staging")
	e.srv.WaitFor("staging's first backup", func() bool { return backupStatus(t, e, "staging").Count == 1 })
	id := backups(t, e, "staging")[0].ID
	ca := kubeconfigCA(t, e.srv.URL(), "staging")
	e.srv.Stop()

	e.work.Write(e2eManifests+"/staging/tenant.yaml", e.read(e2eManifests+"/staging/tenant.yaml")+"  restore:\n    backup: "+id+"\n")
	sha := e.push("Staging: restore " + id + " on the new server\n\nRezuscloud-Allow-Restore: staging")
	e.data = filepath.Join(t.TempDir(), "data") // a new data dir, and a new simulated cloud beside it
	e.srv = newE2EServer(t, e.options(e2eOptions{env: backupEnv, args: backupArgs("file://" + store)}))
	e.srv.Start()
	c := e.srv.waitApplied(sha)
	if r := e2eResult(t, c, "staging"); r.Plane == nil || r.Plane.Restore != id || r.Plane.Bootstrap != "" {
		t.Fatalf("staging on the new server: plane %+v, want the restore of %s and no bootstrap", r.Plane, id)
	}
	if n := len(recoverBootstraps(t, e, "staging")); n != 1 {
		t.Fatalf("%d recovery bootstraps on the new machines, want 1", n)
	}
	if plain := len(planeCalls(t, e, "staging", "Bootstrap")); plain != 1 {
		t.Fatalf("%d bootstraps of the new machines, want the one recovery", plain)
	}
	planeWaitReady(t, e, "staging")
	if got := kubeconfigCA(t, e.srv.URL(), "staging"); got != ca {
		t.Fatalf("the new server's kubeconfig names another CA: the machines were not made with the backup's bundle")
	}
}

// kubeconfigCA is the certificate-authority-data of the tenant's admin
// kubeconfig.
func kubeconfigCA(t *testing.T, server, tenant string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if out, err := exec.Command(servertest.CLI(t), "--server", server, "kubeconfig", tenant, "-f", kc).CombinedOutput(); err != nil {
		t.Fatalf("rezusctl kubeconfig %s: %v\n%s", tenant, err, out)
	}
	b, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "certificate-authority-data" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no certificate-authority-data in the kubeconfig:\n%s", b)
	return ""
}

// metricsText is the server's /metrics.
func metricsText(t *testing.T, e *e2e) string {
	t.Helper()
	resp, err := http.Get(e.srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// downloadNames downloads a backup through the API and returns the names
// in its tar, sorted.
func downloadNames(t *testing.T, e *e2e, tenant, id string) []string {
	t.Helper()
	resp, err := http.Get(e.srv.URL() + "/api/v1/tenants/" + tenant + "/backups/" + id + "/download")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("download %s: %d %s", id, resp.StatusCode, b)
	}
	var names []string
	tr := tar.NewReader(resp.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return names
}
