package tofu

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
)

// stateServer is a real state backend on loopback that takes one editor
// token; it returns the credentials of state t1 with that token.
func stateServer(t *testing.T) Creds {
	t.Helper()
	secret, line, err := backend.NewToken("editor", backend.RoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := backend.NewServer(backend.Config{DataDir: filepath.Join(t.TempDir(), "data"), Listen: "127.0.0.1:0", TokensFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return Creds{Address: srv.URL() + "/tfstate/t1", Username: "editor", Password: secret}
}

// TestStateClient: the one client of the state backend locks, writes
// under the lock, reads, unlocks and deletes a state as tofu does, with
// the run's credentials; a held lock names its holder, a state over the
// bound and a refused request say what failed, and no error holds the
// password.
func TestStateClient(t *testing.T) {
	creds := stateServer(t)
	ctx := context.Background()
	c := StateClient{Creds: creds}
	if got, err := c.Get(ctx); err != nil || got != nil {
		t.Fatalf("Get of no state: %q, %v; want nil, nil", got, err)
	}
	info := []byte(`{"ID":"8e2a6f4c-1b3d-4a5e-9f70-123456789abc","Operation":"OperationTypeApply","Who":"me@here"}`)
	if err := c.Lock(ctx, info); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	other := []byte(`{"ID":"00000000-1111-2222-3333-444444444444","Operation":"OperationTypePlan","Who":"someone@else"}`)
	if err := c.Lock(ctx, other); err == nil || !strings.Contains(err.Error(), "LOCK "+creds.Address) || !strings.Contains(err.Error(), "me@here") {
		t.Fatalf("Lock of a held lock: %v, want LOCK, the address and the holder named", err)
	}
	state := []byte(`{"version":4,"serial":1,"lineage":"f00d","terraform_version":"1.10.10","outputs":{},"resources":[]}`)
	if err := c.Post(ctx, "00000000-1111-2222-3333-444444444444", state); err == nil || !strings.Contains(err.Error(), "POST "+creds.Address) {
		t.Fatalf("Post under another's lock ID: %v, want a refusal that names POST and the address", err)
	}
	if err := c.Post(ctx, "8e2a6f4c-1b3d-4a5e-9f70-123456789abc", state); err != nil {
		t.Fatalf("Post under the lock: %v", err)
	}
	if err := c.Unlock(ctx, info); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if got, err := c.Get(ctx); err != nil || string(got) != string(state) {
		t.Fatalf("Get: %q, %v; want the state posted", got, err)
	}
	small := StateClient{Creds: creds, MaxBytes: 16}
	if _, err := small.Get(ctx); err == nil || !strings.Contains(err.Error(), "larger than 16 bytes") {
		t.Fatalf("Get of a state over MaxBytes: %v, want the bound named", err)
	}
	wrong := StateClient{Creds: Creds{Address: creds.Address, Username: "editor", Password: "not-the-secret-at-all"}}
	if _, err := wrong.Get(ctx); err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), wrong.Creds.Password) {
		t.Fatalf("Get with a wrong password: %v, want 401 without the password", err)
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatalf("Delete of a state that is gone: %v, want none", err)
	}
	if got, err := c.Get(ctx); err != nil || got != nil {
		t.Fatalf("Get after Delete: %q, %v; want nil, nil", got, err)
	}

	// An address where nothing listens: the error names the method and
	// the address once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String() + "/tfstate/t1"
	l.Close()
	err = StateClient{Creds: Creds{Address: gone, Password: "pw-pw-pw-pw-pw"}}.Delete(ctx)
	if err == nil || strings.Count(err.Error(), gone) != 1 || !strings.HasPrefix(err.Error(), "state backend: DELETE "+gone+": ") {
		t.Fatalf("Delete at a closed port: %v", err)
	}
}

// TestStateClientGivesUpOnASilentPeer: a kept-alive connection that
// leads to a replica that stopped answering (paused) fails the request
// after the answer timeout, and the next request takes a new connection,
// which another replica answers.
func TestStateClientGivesUpOnASilentPeer(t *testing.T) {
	creds := stateServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// A balancer that sends the first connection to a peer that reads
	// and never answers, and every later one to the state backend.
	target := strings.TrimPrefix(strings.Split(creds.Address, "/tfstate")[0], "http://")
	var conns atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if conns.Add(1) == 1 {
				go func() { _, _ = io.Copy(io.Discard, c) }()
				continue
			}
			go relay(c, target)
		}
	}()
	c := StateClient{Creds: creds, HTTP: answerBounded(300 * time.Millisecond)}
	c.Creds.Address = "http://" + l.Addr().String() + "/tfstate/t1"
	start := time.Now()
	if _, err := c.Get(t.Context()); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a read from a silent peer: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the read from a silent peer gave up after %s, want about 300ms", took)
	}
	if _, err := c.Get(t.Context()); err != nil {
		t.Fatalf("the next read, through a new connection: %v", err)
	}
}

// relay joins c to addr.
func relay(c net.Conn, addr string) {
	defer c.Close()
	d, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer d.Close()
	go func() { _, _ = io.Copy(d, c) }()
	_, _ = io.Copy(c, d)
}
