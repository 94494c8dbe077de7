package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// runStoreCmd runs `rezuscloud ARGS` with env as the environment and
// returns what it printed.
func runStoreCmd(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd(func(k string) string { return env[k] })
	out := new(bytes.Buffer)
	root.SetOut(out)
	root.SetErr(new(bytes.Buffer))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// storeServer runs the server's Main with a tokens file and one tenant in
// its store, until the test ends or the returned stop is called.
func storeServer(t *testing.T, tokens string) (m *Main, stop func()) {
	t.Helper()
	m = NewMain(testServeFlags(t, servertest.Options{TokensFile: tokens}), slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	err := m.Server.Store().Update(func(tx store.Tx) error {
		tenant := &schema.Tenant{}
		tenant.Metadata.Name = "alpha"
		_, err := tx.PutObject(schema.KindTenant, "alpha", tenant)
		return err
	})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return m, stop
}

// wantFile fails unless path holds want.
func wantFile(t *testing.T, path, want string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != want {
		t.Errorf("%s holds %q, %v; want %q", path, b, err, want)
	}
}

// TestStoreBackupThroughServer copies the store of a running server with
// an admin token, from the environment or a token file: the file (0600)
// is a whole store, and the server's audit log records the download. A
// viewer's token is refused, and the file it was to replace stays as it
// was; so does it when the data dir is named instead of the server.
func TestStoreBackupThroughServer(t *testing.T) {
	tokens, secrets := servertest.Tokens(t, map[string]string{"ops": "admin", "viewer": "view"})
	m, _ := storeServer(t, tokens)
	dir := t.TempDir()
	file := filepath.Join(dir, "copy.db")
	out, err := runStoreCmd(t, map[string]string{envToken: secrets["ops"]}, "store", "backup", file, "--server", m.Server.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "wrote "+file+": the store of "+m.Server.URL()+", revision 1, 1 tenant, 0 TF states") {
		t.Errorf("store backup printed %q", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", file, fi.Mode(), err)
	}
	if info, err := bolt.CheckFile(file); err != nil || info.Tenants != 1 {
		t.Errorf("the copy: %+v, %v", info, err)
	}
	audit, _ := os.ReadFile(filepath.Join(m.flags.data, "audit.log"))
	if !strings.Contains(string(audit), `"msg":"download ended","who":"ops","source":"token","role":"admin","what":"store backup"`) {
		t.Errorf("the audit log does not record the download:\n%s", audit)
	}

	tokenFile := filepath.Join(dir, "ops.token")
	os.WriteFile(tokenFile, []byte(secrets["ops"]+"\n"), 0o600)
	if _, err := runStoreCmd(t, nil, "store", "backup", filepath.Join(dir, "again.db"), "--server", m.Server.URL(), "--token-file", tokenFile); err != nil {
		t.Errorf("store backup with --token-file: %v", err)
	}

	os.WriteFile(file, []byte("kept"), 0o600)
	_, err = runStoreCmd(t, map[string]string{envToken: secrets["viewer"]}, "store", "backup", file, "--server", m.Server.URL())
	if err == nil || !strings.Contains(err.Error(), "needs admin") {
		t.Errorf("store backup with a viewer's token: %v, want a refusal saying it needs admin", err)
	}
	_, err = runStoreCmd(t, nil, "store", "backup", file, "--data", m.flags.data)
	if err == nil || err.Error() != "a server runs on "+m.flags.data+"; use --server URL" {
		t.Errorf("store backup --data of a running server: %v", err)
	}
	wantFile(t, file, "kept")
	if names, _ := filepath.Glob(filepath.Join(dir, ".*")); len(names) > 0 {
		t.Errorf("refused copies left %v", names)
	}
}

// TestStoreBackupOffline copies the store of a data dir where no server
// runs; the flags must name a server or a data dir, not both.
func TestStoreBackupOffline(t *testing.T) {
	m, stop := storeServer(t, "")
	stop()
	file := filepath.Join(t.TempDir(), "copy.db")
	out, err := runStoreCmd(t, nil, "store", "backup", file, "--data", m.flags.data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "the store of "+m.flags.data+", revision 1, 1 tenant") {
		t.Errorf("store backup --data printed %q", out)
	}
	if _, err := bolt.CheckFile(file); err != nil {
		t.Error(err)
	}
	for _, args := range [][]string{
		{"store", "backup", file},
		{"store", "backup", file, "--data", m.flags.data, "--server", "http://127.0.0.1:1"},
	} {
		if _, err := runStoreCmd(t, nil, args...); err == nil || !strings.Contains(err.Error(), "give --server URL") {
			t.Errorf("%v: %v, want an error saying which flag to give", args, err)
		}
	}
	if _, err := runStoreCmd(t, nil, "store", "backup", file, "--data", t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no store") {
		t.Errorf("store backup --data of an empty dir: %v", err)
	}
}

// TestStoreRestore puts a copy in place as the store of a new data dir,
// where a server then starts on it; it refuses to replace that store
// without --force, and with it while the server runs, and a file that is
// not a store.
func TestStoreRestore(t *testing.T) {
	m, stop := storeServer(t, "")
	stop()
	file := filepath.Join(t.TempDir(), "copy.db")
	if _, err := runStoreCmd(t, nil, "store", "backup", file, "--data", m.flags.data); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "new")
	out, err := runStoreCmd(t, nil, "store", "restore", file, "--data", data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "restored "+file+" into "+data+": revision 1, 1 tenant") {
		t.Errorf("store restore printed %q", out)
	}
	if fi, err := os.Stat(filepath.Join(data, bolt.DBFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the restored store: %v, %v; want mode 0600", fi.Mode(), err)
	}
	_, err = runStoreCmd(t, nil, "store", "restore", file, "--data", data)
	if err == nil || !strings.Contains(err.Error(), "give --force") {
		t.Errorf("a second restore without --force: %v", err)
	}
	if _, err := runStoreCmd(t, nil, "store", "restore", file, "--data", data, "--force"); err != nil {
		t.Errorf("restore --force: %v", err)
	}

	f := testServeFlags(t, servertest.Options{Data: data})
	srv := NewMain(f, slog.New(slog.DiscardHandler))
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	var tenant schema.Tenant
	srv.Server.Store().View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, "alpha", &tenant) })
	if tenant.Metadata.Name != "alpha" {
		t.Error("the server on the restored data dir does not have the tenant")
	}
	_, err = runStoreCmd(t, nil, "store", "restore", file, "--data", data, "--force")
	if err == nil || err.Error() != "a server runs on "+data+": stop the server first" {
		t.Errorf("restore while a server runs: %v", err)
	}
	srv.Close()

	bad := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(bad, bytes.Repeat([]byte("not a store\n"), 1000), 0o600)
	if _, err := runStoreCmd(t, nil, "store", "restore", bad, "--data", data, "--force"); err == nil || !strings.Contains(err.Error(), "not a store file") {
		t.Errorf("restore of a text file: %v", err)
	}
	if _, err := runStoreCmd(t, nil, "store", "restore", file); err == nil || !strings.Contains(err.Error(), "give --data DIR") {
		t.Errorf("restore without --data: %v", err)
	}
}
