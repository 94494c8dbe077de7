package test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// crashCreateDelay is how long the sim cloud takes to create a machine in
// TestCrashMidApply: the machine file exists at once, and tofu learns of
// the machine only when this has passed.
const crashCreateDelay = "4s"

// simMachines returns the ids of the sim cloud's machines of a tenant.
func simMachines(t *testing.T, dir, tenant string) []string {
	t.Helper()
	st, err := sim.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		if r.Tenant == tenant {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// crashAuth makes every request of the test's HTTP client carry token, for
// a server with a tokens file: the tofu that a killed server leaves running
// must meet the restarted server's refusal of its dead credentials, as it
// would in production.
type crashAuth struct {
	token string
	next  http.RoundTripper
}

func (a crashAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.next.RoundTrip(r)
}

// crashTokens writes a tokens file with one admin token and makes the
// test's HTTP client use it until the test ends.
func crashTokens(t *testing.T) string {
	t.Helper()
	secret, line, err := backend.NewToken("crash-admin", backend.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := http.DefaultClient
	http.DefaultClient = &http.Client{Transport: crashAuth{token: secret, next: http.DefaultTransport}}
	t.Cleanup(func() { http.DefaultClient = old })
	return path
}

// tofuRunning reports whether a tofu apply still writes to the run output
// in dir: it holds a flock on it while it runs.
func tofuRunning(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ".rezuscloud-tofu.out"))
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil
}

// TestCrashMidApply kills the server with SIGKILL while tofu applies a
// scale-up whose new machines already exist in the sim cloud but not yet in
// the state, and starts it again. tofu must outlive the server and save the
// state in errored.tfstate (encrypted, as state encryption is on); the
// restarted server releases the lock its dead run left (log line and audit
// record), pushes errored.tfstate back, and applies the commit without any
// hand work. Afterwards the sim cloud and the state agree on the machines.
//
// "saved first" restarts once tofu has saved errored.tfstate and exited;
// "restart at once" restarts while tofu still runs, as a supervisor would:
// the tenant's run waits for it. The server has a tokens file, so the
// restarted server refuses the dead run's credentials. The time from
// restart to applied is logged.
func TestCrashMidApply(t *testing.T) {
	for _, c := range []struct {
		name      string
		waitSaved bool
	}{{"saved first", true}, {"restart at once", false}} {
		t.Run(c.name, func(t *testing.T) { crashMidApply(t, c.waitSaved) })
	}
}

func crashMidApply(t *testing.T, waitSaved bool) {
	e := newE2E(t, e2eOptions{args: []string{"--tokens-file", crashTokens(t)}, env: []string{
		"REZUSCLOUD_STATE_PASSPHRASE=" + atRestPassphrase,
		"REZUSSIM_CREATE_DELAY=" + crashCreateDelay,
	}})
	s := e.srv
	simDir := e.data + "-sim" // the default sim dir, beside the data dir
	work := filepath.Join(e.data, "work", "production")
	before := len(s.tenantMachines("production"))
	if n := len(simMachines(t, simDir, "production")); n != before {
		t.Fatalf("before the scale-up: %d sim machines, %d in state", n, before)
	}

	const workers = 10 // from 2: eight new machines
	e.setCount("production", "workers", workers)
	scaled := e.push("Scale production workers to 10")
	s.WaitFor("the new machines to exist in the sim cloud", func() bool {
		return len(simMachines(t, simDir, "production")) == before+workers-2
	})
	if got := len(s.tenantMachines("production")); got != before {
		t.Fatalf("the state knows %d machines before the kill, want %d: the apply was not in its middle", got, before)
	}
	s.Kill()

	errored := filepath.Join(work, "errored.tfstate")
	if waitSaved {
		deadline := time.Now().Add(e2eTimeout)
		for tofuRunning(t, work) {
			if time.Now().After(deadline) {
				t.Fatalf("tofu still runs %v after the kill", e2eTimeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		b, err := os.ReadFile(errored)
		if err != nil {
			t.Fatalf("tofu saved no errored.tfstate: it did not outlive the server (%v)", err)
		}
		checkEncryptedState(t, b)
	} else if !tofuRunning(t, work) {
		t.Fatal("no tofu runs after the kill: it did not outlive the server")
	}

	restart := time.Now()
	s.Start()
	c := s.waitApplied(scaled)
	took := time.Since(restart)
	t.Logf("restart to applied after SIGKILL mid-apply (%s): %v", map[bool]string{true: "errored.tfstate saved before the restart", false: "restarted at once"}[waitSaved], took.Round(10*time.Millisecond))

	if r := e2eResult(t, c, "production"); r.Phase != schema.CommitSucceeded || !strings.Contains(r.OutputTail, "rezuscloud: pushed errored.tfstate") {
		t.Errorf("production after the restart: %s; pushed errored.tfstate: %v", r.Phase, strings.Contains(r.OutputTail, "pushed errored.tfstate"))
	}
	inState := e2eKeys(e2eMachineIDs(s.tenantMachines("production")))
	inCloud := simMachines(t, simDir, "production")
	sort.Strings(inCloud)
	if strings.Join(inState, ",") != strings.Join(inCloud, ",") {
		t.Errorf("the state knows machines %v, the sim cloud has %v", inState, inCloud)
	}
	if len(inCloud) != 3+workers {
		t.Errorf("%d machines in the sim cloud, want %d", len(inCloud), 3+workers)
	}
	if _, err := os.Stat(errored); !os.IsNotExist(err) {
		t.Errorf("errored.tfstate is still there after it was pushed: %v", err)
	}
	log := s.Log()
	if waited := strings.Contains(log, "waiting for a tofu apply of an earlier server process to finish"); waited == waitSaved {
		t.Errorf("the tenant's run waited for the earlier tofu: %v, want %v", waited, !waitSaved)
	}
	if !strings.Contains(log, "released a state lock left by an earlier run") || !strings.Contains(log, "holder=reconciler-production") {
		t.Errorf("the server log says nothing of the lock it released")
	}
	audit, err := os.ReadFile(filepath.Join(e.data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(audit, []byte(`"msg":"state lock released"`)) || !bytes.Contains(audit, []byte(`"holder":"reconciler-production"`)) {
		t.Errorf("audit.log records no release of the lock:\n%s", audit)
	}
	if hits, _ := scanAtRest(t, e.data); len(hits) > 0 {
		t.Errorf("after the crash, %s holds a %s at rest", hits[0].file, hits[0].what)
	}
}

// checkEncryptedState fails unless b is an OpenTofu-encrypted state.
func checkEncryptedState(t *testing.T, b []byte) {
	t.Helper()
	var st struct {
		EncryptedData string          `json:"encrypted_data"`
		Resources     json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.EncryptedData == "" || st.Resources != nil {
		t.Errorf("errored.tfstate is not encrypted (%d bytes, err %v, resources in clear %v)", len(b), err, st.Resources != nil)
	}
}
