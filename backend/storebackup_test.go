package backend

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// TestStoreBackupDownload: an admin downloads a copy of the store that
// opens as a store and holds the TF state as it was stored; view and
// edit tokens and requests without credentials are refused, and every
// attempt is in the audit log.
func TestStoreBackupDownload(t *testing.T) {
	ts := startServer(t, Config{}, true)
	audit := &syncBuffer{}
	ts.SetAudit(slog.New(slog.NewJSONHandler(audit, nil)))
	state := []byte(`{"serial":1,"lineage":"l","encryption_version":"v0","encrypted_data":"c2VhbGVk"}`)
	code, body := ts.do(t, req{method: "POST", path: StatePrefix + "alpha", token: "editor", body: state, md5: true})
	wantCode(t, "POST state", code, body, http.StatusOK)

	code, body = ts.do(t, req{method: "GET", path: StoreBackupPath, token: "admin"})
	wantCode(t, "GET "+StoreBackupPath, code, body, http.StatusOK)
	file := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := bolt.CheckFile(file)
	if err != nil {
		t.Fatalf("the download is not a store: %v", err)
	}
	if info.States != 1 || info.Size != int64(len(body)) {
		t.Errorf("the download holds %+v, want one state", info)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := bolt.Restore(dir, file, false); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	defer s.Close()
	s.View(func(tx store.Tx) error {
		if got := store.CurrentState(tx, "alpha"); !bytes.Equal(got, state) {
			t.Errorf("the copy's state is %q, want the bytes stored", got)
		}
		return nil
	})

	for _, token := range []string{"viewer", "editor"} {
		code, body := ts.do(t, req{method: "GET", path: StoreBackupPath, token: token})
		wantCode(t, token, code, body, http.StatusForbidden)
		wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, "needs admin")
	}
	code, body = ts.do(t, req{method: "GET", path: StoreBackupPath})
	wantCode(t, "no token", code, body, http.StatusUnauthorized)
	code, body = ts.do(t, req{method: "DELETE", path: StoreBackupPath, token: "admin"})
	wantCode(t, "DELETE", code, body, http.StatusMethodNotAllowed)

	a := audit.String()
	for _, want := range []string{
		`"msg":"download","who":"admin","source":"token","role":"admin","what":"store backup"`,
		`"msg":"download ended","who":"admin"`,
		`"msg":"download refused","who":"viewer","source":"token","role":"view","what":"store backup"`,
		`"msg":"download refused","who":"editor","source":"token","role":"edit","what":"store backup"`,
		`"msg":"download refused","who":"(unauthenticated)","what":"store backup"`,
	} {
		if !strings.Contains(a, want) {
			t.Errorf("the audit log lacks %s:\n%s", want, a)
		}
	}
}

// failingBackup fails after writing part of a copy, or before any.
type failingBackup struct{ after int }

func (f failingBackup) WriteBackup(w io.Writer) (int64, error) {
	var n int
	if f.after > 0 {
		n, _ = w.Write(make([]byte, f.after))
	}
	return int64(n), errors.New("read rezuscloud.db: input/output error")
}

// TestStoreBackupFailure: a copy that fails before its first byte answers
// 500; one that fails later ends the connection, so that the client sees
// a broken download, never a short one that looks whole.
func TestStoreBackupFailure(t *testing.T) {
	ts := startServer(t, Config{}, false)
	ts.serveStoreBackup("GET /test/store/none", failingBackup{})
	ts.serveStoreBackup("GET /test/store/part", failingBackup{after: 64 << 10})

	code, body := ts.do(t, req{method: "GET", path: "/test/store/none"})
	wantCode(t, "a copy failing at once", code, body, http.StatusInternalServerError)
	wantAPIError(t, body, http.StatusInternalServerError, api.ReasonInternalError, "server log")

	resp, err := http.Get(ts.URL() + "/test/store/part")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Errorf("a copy failing after %d bytes read as a whole download of %d bytes", 64<<10, n)
	}
	if !strings.Contains(ts.logs.String(), "input/output error") {
		t.Errorf("the server log lacks the failure:\n%s", ts.logs.String())
	}
}

// storeWithoutCopy is a store that makes no copy of itself, as the etcd
// engine's: the bbolt engine's store without its WriteBackup.
type storeWithoutCopy struct{ store.Store }

// TestStoreGiven: a server given an open store (Config.Store) keeps its
// data in it, not in a store of its data dir, and closes it when it
// closes; one whose store makes no copy of itself answers the store's
// download with how to back it up instead, to admins only.
func TestStoreGiven(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "elsewhere")
	given := openStore(t, dir)
	ts := startServer(t, Config{Store: storeWithoutCopy{given}}, true)
	state := []byte(`{"version":4,"serial":1,"lineage":"l"}`)
	code, body := ts.do(t, req{method: "POST", path: StatePrefix + "alpha", token: "editor", body: state, md5: true})
	wantCode(t, "POST state", code, body, http.StatusOK)

	code, body = ts.do(t, req{method: "GET", path: StoreBackupPath, token: "admin"})
	wantCode(t, "GET "+StoreBackupPath, code, body, http.StatusNotImplemented)
	wantAPIError(t, body, http.StatusNotImplemented, api.ReasonInternalError, "etcdctl snapshot save")
	code, body = ts.do(t, req{method: "GET", path: StoreBackupPath, token: "viewer"})
	wantCode(t, "a viewer's GET "+StoreBackupPath, code, body, http.StatusForbidden)

	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ts.cfg.DataDir, bolt.DBFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server made a store in its data dir too: %v", err)
	}
	s := openStore(t, dir)
	defer s.Close()
	s.View(func(tx store.Tx) error {
		if got := store.CurrentState(tx, "alpha"); !bytes.Equal(got, state) {
			t.Errorf("the given store's state is %q, want the bytes POSTed", got)
		}
		return nil
	})
}
