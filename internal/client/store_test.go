package client_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// TestStoreBackup downloads a copy of the real server's store with an
// admin token; a viewer's token is refused with the server's reason, and
// a download that breaks off is an error, not a short copy.
func TestStoreBackup(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	s.put(t, tenant("alpha", nil, "active"))
	var out bytes.Buffer
	n, err := newClient(t, s.URL(), s.tokens["admin"], nil).StoreBackup(ctx(t), &out)
	if err != nil || n != int64(out.Len()) || n == 0 {
		t.Fatalf("StoreBackup: %d bytes, %v; wrote %d", n, err, out.Len())
	}
	file := filepath.Join(t.TempDir(), "copy.db")
	os.WriteFile(file, out.Bytes(), 0o600)
	if info, err := bolt.CheckFile(file); err != nil || info.Tenants != 1 {
		t.Fatalf("the copy: %+v, %v; want a store of one tenant", info, err)
	}

	_, err = newClient(t, s.URL(), s.tokens["viewer"], nil).StoreBackup(ctx(t), new(bytes.Buffer))
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(err.Error(), "needs admin") {
		t.Fatalf("StoreBackup as a viewer: %v, want 403 saying it needs admin", err)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 4096))
		panic(http.ErrAbortHandler)
	}))
	defer broken.Close()
	_, err = newClient(t, broken.URL, "", nil).StoreBackup(ctx(t), new(bytes.Buffer))
	var ce *client.ConnError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "broke off after 4096 bytes") {
		t.Fatalf("a broken download: %v, want a ConnError saying where it broke off", err)
	}
}

// TestReadTokenFile takes the first line of a token file and never quotes
// the token in an error.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("\n  rzc_secret  \n# comment\n"), 0o600)
	if tok, err := client.ReadTokenFile(file); err != nil || tok != "rzc_secret" {
		t.Fatalf("ReadTokenFile = %q, %v", tok, err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	if _, err := client.ReadTokenFile(empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("ReadTokenFile of an empty file: %v", err)
	}
}
