package test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// storePassphrase encrypts the states of TestStoreBackupRestoreResumes.
const storePassphrase = "store-backup-passphrase-0123456789"

// TestStoreBackupRestoreResumes replaces the management server: a server
// with state encryption applies tenant staging; `rezuscloud store backup`
// copies its store through the running server with an admin token; the
// server stops, `rezuscloud store restore` puts the copy into a new data
// dir, and a server started there with the same repository, passphrase
// and cloud goes on where the old one left off. The tenant is there as it
// was applied, its TF state is the same bytes, its machines keep their
// uids, and the commit the old server applied is reconciled again without
// a single tofu run, and the machines get no call: the cluster stays
// bootstrapped once. The copy holds the state encrypted, as the store
// keeps it.
func TestStoreBackupRestoreResumes(t *testing.T) {
	tokens, secrets := servertest.Tokens(t, map[string]string{"ops": "admin"})
	old := http.DefaultClient
	http.DefaultClient = &http.Client{Transport: crashAuth{token: secrets["ops"], next: http.DefaultTransport}}
	t.Cleanup(func() { http.DefaultClient = old })

	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(t.TempDir(), "data")}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	e.copyExamples()
	if err := os.RemoveAll(filepath.Join(e.work.Dir(), e2eManifests, "production")); err != nil { // one tenant: the quicker
		t.Fatal(err)
	}
	e.first = e.push("Tenant staging")
	simDir := e.data + "-sim" // the cloud: it outlives the management server
	opts := e.options(e2eOptions{
		args: []string{"--tokens-file", tokens, "--sim-dir", simDir},
		env:  []string{"REZUSCLOUD_STATE_PASSPHRASE=" + storePassphrase},
	})
	s := newE2EServer(t, opts)
	s.Start()
	e.srv = s
	s.waitApplied(e.first)
	planeWaitReady(t, e, "staging")
	var tenant schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tenant)
	machines := e2eMachineIDs(s.tenantMachines("staging"))
	state := storeState(t, s)
	if len(machines) != 2 || !bytes.Contains(state, []byte(`"encrypted_data"`)) {
		t.Fatalf("before the backup: %d machines, state encrypted %v; want 2 machines and an encrypted state",
			len(machines), bytes.Contains(state, []byte(`"encrypted_data"`)))
	}

	file := filepath.Join(t.TempDir(), "rezuscloud-copy.db")
	storeCmd(t, []string{"REZUSCLOUD_TOKEN=" + secrets["ops"]}, "store", "backup", file, "--server", s.URL())
	s.Stop()
	calls := storeJournal(t, simDir, machines)
	copied, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(copied, state) {
		t.Error("the copy does not hold the tenant's state as the store kept it")
	}
	for _, m := range pemMarkers() {
		if bytes.Contains(copied, []byte(m)) {
			t.Errorf("the copy holds PEM marker %q: a state was decrypted", m)
		}
	}

	restored := filepath.Join(t.TempDir(), "restored")
	storeCmd(t, nil, "store", "restore", file, "--data", restored)
	again := opts
	again.Data = restored
	s2 := newE2EServer(t, again)
	s2.Start()
	e.srv = s2
	c := s2.waitApplied(e.first)
	planeWaitReady(t, e, "staging")
	if got := s2.tofuRuns(); got != 0 {
		t.Errorf("the server on the restored store ran tofu %d times for the commit the old one applied, want 0", got)
	}
	if c.Status.Phase != schema.CommitSucceeded {
		t.Errorf("commit %s on the restored store: %s", e.first[:12], e2eBrief(c.Status))
	}
	var after schema.Tenant
	s2.mustGet("/api/v1/tenants/staging", &after)
	if after.Metadata.UID != tenant.Metadata.UID || after.Status.ObservedCommit != e.first || after.Status.Phase != tenant.Status.Phase {
		t.Errorf("tenant staging on the restored store: uid %s, observed %s, phase %s; want uid %s, observed %s, phase %s",
			after.Metadata.UID, after.Status.ObservedCommit, after.Status.Phase, tenant.Metadata.UID, e.first, tenant.Status.Phase)
	}
	if diff := cmp.Diff(machines, e2eMachineIDs(s2.tenantMachines("staging"))); diff != "" {
		t.Errorf("machines on the restored store (-before +after):\n%s", diff)
	}
	if got := storeState(t, s2); !bytes.Equal(got, state) {
		t.Errorf("the TF state on the restored store differs: %d bytes, were %d", len(got), len(state))
	}
	if diff := cmp.Diff(calls, storeJournal(t, simDir, machines)); diff != "" {
		t.Errorf("the server on the restored store called the machines (-before +after):\n%s", diff)
	}
	if got := planeBootstraps(t, e, "staging"); len(got) != 1 {
		t.Errorf("bootstraps %v, want exactly one", got)
	}
}

// storeJournal returns the write calls each machine's journal records, by
// machine.
func storeJournal(t *testing.T, simDir string, machines map[string]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for id := range machines {
		j, err := talosnode.ReadJournal(simDir, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range j {
			out[id] = append(out[id], c.Call)
		}
	}
	return out
}

// storeState returns tenant staging's TF state as the server stores it.
func storeState(t *testing.T, s *e2eServer) []byte {
	t.Helper()
	code, b := s.Request(http.MethodGet, "/tfstate/staging", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /tfstate/staging: %d %s", code, b)
	}
	return b
}

// storeCmd runs `rezuscloud ARGS` with env added to the environment and
// fails the test unless it succeeds.
func storeCmd(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rezuscloud %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("rezuscloud %s: %s", args[1], strings.TrimSpace(string(out)))
}
