package bolt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// backupState is an encrypted TF state as tofu writes one: the copy keeps
// these bytes as they are.
const backupState = `{"serial":3,"lineage":"lin-1","meta":{"key_provider.pbkdf2.k":"e30="},"encrypted_data":"c2VhbGVk","encryption_version":"v0"}`

// fillStore writes a tenant, a record and a TF state, and returns the
// store's revision after them.
func fillStore(t *testing.T, s *Store) uint64 {
	t.Helper()
	var rv uint64
	err := s.Update(func(tx store.Tx) error {
		tenant := &schema.Tenant{}
		tenant.Metadata.Name = "alpha"
		if _, err := tx.PutObject(schema.KindTenant, "alpha", tenant); err != nil {
			return err
		}
		if _, err := tx.Put("Record", "alpha", []byte(`{"applied":"abc"}`)); err != nil {
			return err
		}
		serial, lineage, err := store.ParseState([]byte(backupState))
		if err != nil {
			return err
		}
		_, err = store.WriteState(tx, "alpha", store.StateWrite{Data: []byte(backupState), Serial: serial, Lineage: lineage, Token: "t", Time: time.Unix(0, 0), Keep: 1})
		rv = tx.ResourceVersion()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// snooper writes to a buffer and calls once before its first write.
type snooper struct {
	bytes.Buffer
	once func()
}

func (w *snooper) Write(p []byte) (int, error) {
	if w.once != nil {
		w.once()
		w.once = nil
	}
	return w.Buffer.Write(p)
}

// TestBackupRestore copies a store while it is open and written to: the
// copy is the store as of one commit, with its TF state byte for byte,
// and Restore puts it in place as the store of a new data dir, once, and
// again only when forced, never while a process holds that store open.
func TestBackupRestore(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	s := openStore(t, src)
	defer s.Close()
	rv := fillStore(t, s)

	// A commit made while the copy is being written is not in it.
	w := &snooper{once: func() {
		if err := s.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "later", []byte(`{}`)); return err }); err != nil {
			t.Errorf("a write during the copy: %v", err)
		}
	}}
	n, err := s.WriteBackup(w)
	if err != nil || n != int64(w.Len()) {
		t.Fatalf("WriteBackup: %d bytes, %v; wrote %d", n, err, w.Len())
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(file, w.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := CheckFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := (FileInfo{Format: storeFormat, Revision: rv, Tenants: 1, States: 1, Size: n}); info != want {
		t.Errorf("CheckFile = %+v, want %+v", info, want)
	}

	// Offline copies need the store closed.
	if _, err := BackupDir(src, new(bytes.Buffer), 100*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Errorf("BackupDir of an open store: %v, want ErrLocked", err)
	}
	if _, err := BackupDir(t.TempDir(), new(bytes.Buffer), 100*time.Millisecond); !errors.Is(err, ErrNoStore) {
		t.Errorf("BackupDir of an empty dir: %v, want ErrNoStore", err)
	}

	dst := filepath.Join(t.TempDir(), "new")
	if _, err := Restore(dst, file, false); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dst: 0o700, filepath.Join(dst, DBFile): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %04o", path, fi.Mode(), err, want)
		}
	}
	if _, err := Restore(dst, file, false); !errors.Is(err, ErrExists) {
		t.Errorf("a second Restore without force: %v, want ErrExists", err)
	}
	if _, err := Restore(dst, file, true); err != nil {
		t.Errorf("a forced Restore: %v", err)
	}

	r := openStore(t, dst)
	defer r.Close()
	if _, err := Restore(dst, file, true); !errors.Is(err, ErrLocked) {
		t.Errorf("Restore over an open store: %v, want ErrLocked", err)
	}
	err = r.View(func(tx store.Tx) error {
		if tx.ResourceVersion() != rv {
			t.Errorf("restored revision %d, want %d", tx.ResourceVersion(), rv)
		}
		if _, err := tx.Get("Record", "later"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the restored store holds a record written after the copy began: %v", err)
		}
		var tenant schema.Tenant
		if err := tx.GetObject(schema.KindTenant, "alpha", &tenant); err != nil {
			return err
		}
		if got := store.CurrentState(tx, "alpha"); string(got) != backupState {
			t.Errorf("restored state %q, want the bytes stored", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBackupDirOffline copies a closed store without opening it for
// writing.
func TestBackupDirOffline(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	s := openStore(t, src)
	rv := fillStore(t, s)
	s.Close()
	before, _ := os.ReadFile(filepath.Join(src, DBFile))
	var out bytes.Buffer
	info, err := BackupDir(src, &out, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != rv || info.Size != int64(out.Len()) || info.States != 1 {
		t.Errorf("BackupDir = %+v, want revision %d, one state, %d bytes", info, rv, out.Len())
	}
	if after, _ := os.ReadFile(filepath.Join(src, DBFile)); !bytes.Equal(before, after) {
		t.Error("BackupDir changed the store file")
	}
}

// TestCheckFileRefuses: files that are not whole stores of a format this
// build reads are refused with what is wrong, and Restore of one leaves
// the data dir's store as it was.
func TestCheckFileRefuses(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "data"))
	fillStore(t, s)
	var good bytes.Buffer
	if _, err := s.WriteBackup(&good); err != nil {
		t.Fatal(err)
	}
	s.Close()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bolt := func(name string, fn func(*bbolt.Tx) error) string {
		p := filepath.Join(dir, name)
		db, err := bbolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
		db.Close()
		return p
	}
	future := bolt("future.db", func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketResources, bucketStates, bucketLocks} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte("3"))
	})
	for _, c := range []struct{ path, want string }{
		{write("empty.db", nil), "empty"},
		{write("text.db", bytes.Repeat([]byte("not a database\n"), 1000)), "not a store file"},
		{write("short.db", good.Bytes()[:good.Len()/2]), "cut short"},
		{bolt("other.db", func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err }), "no meta bucket"},
		{future, `file format "3"`},
		{filepath.Join(dir, "missing.db"), "no such file"},
	} {
		if _, err := CheckFile(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckFile(%s): %v, want an error saying %q", filepath.Base(c.path), err, c.want)
		}
	}

	dst := filepath.Join(dir, "restored")
	if _, err := Restore(dst, write("good.db", good.Bytes()), false); err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(filepath.Join(dst, DBFile))
	if _, err := Restore(dst, future, true); err == nil {
		t.Fatal("a forced Restore of a file of an unknown format succeeded")
	}
	if now, _ := os.ReadFile(filepath.Join(dst, DBFile)); !bytes.Equal(kept, now) {
		t.Error("a refused Restore changed the data dir's store")
	}
}
