package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, &StoreOptions{OpenTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreOpenModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, DBFile): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %04o, want %04o", path, got, want)
		}
	}
	// A second open of the same store waits for the first and gives up.
	if _, err := Open(dir, &StoreOptions{OpenTimeout: 100 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Open: %v, want an error saying the store is in use", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loose, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(loose, nil); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("Open of a 0755 dir: %v, want a refusal that says how to fix it", err)
	}
	// An empty dir, such as a fresh `mkdir data`, is made private.
	empty := filepath.Join(t.TempDir(), "empty")
	os.Mkdir(empty, 0o755)
	os.Chmod(empty, 0o755)
	s, err := Open(empty, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Stat(empty); fi.Mode().Perm() != 0o700 {
		t.Errorf("empty data dir has mode %04o after Open, want 0700", fi.Mode().Perm())
	}
	if _, err := Open("", nil); err == nil {
		t.Fatal("Open without a dir succeeded")
	}
}

func TestStoreResources(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	var got [][]Change
	s.OnCommit(func(c []Change) { got = append(got, c) })

	err := s.Update(func(tx *Tx) error {
		if rv, err := tx.Put("Record", "a", []byte(`{"n":1}`)); err != nil || rv != 1 {
			t.Fatalf("Put = %d, %v", rv, err)
		}
		if rv, err := tx.Put("Record", "b", []byte(`{"n":2}`)); err != nil || rv != 2 {
			t.Fatalf("Put = %d, %v", rv, err)
		}
		if rv, err := tx.Put("Note", "m1", []byte(`{}`)); err != nil || rv != 3 {
			t.Fatalf("Put = %d, %v", rv, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *Tx) error {
		if rv, err := tx.Put("Record", "a", []byte(`{"n":1}`)); err != nil || rv != 1 {
			t.Fatalf("Put of the same bytes = %d, %v; want the old version 1", rv, err)
		}
		if rv, err := tx.Put("Record", "a", []byte(`{"n":10}`)); err != nil || rv != 4 {
			t.Fatalf("Put = %d, %v", rv, err)
		}
		if rv, err := tx.Delete("Record", "b"); err != nil || rv != 5 {
			t.Fatalf("Delete = %d, %v", rv, err)
		}
		if _, err := tx.Delete("Record", "b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Delete of a missing resource: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A rolled-back transaction changes nothing and calls no hook.
	boom := errors.New("boom")
	err = s.Update(func(tx *Tx) error {
		tx.Put("Record", "c", []byte(`{}`))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}

	type ev struct {
		Type       EventType
		Kind, Name string
		RV         uint64
		Object     string
	}
	var evs [][]ev
	for _, cs := range got {
		var e []ev
		for _, c := range cs {
			e = append(e, ev{c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.ResourceVersion, string(c.Resource.Object)})
		}
		evs = append(evs, e)
	}
	want := [][]ev{
		{{Added, "Record", "a", 1, `{"n":1}`}, {Added, "Record", "b", 2, `{"n":2}`}, {Added, "Note", "m1", 3, `{}`}},
		{{Modified, "Record", "a", 4, `{"n":10}`}, {Deleted, "Record", "b", 5, `{"n":2}`}},
	}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Fatalf("commit hooks (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Everything persists across a reopen, and the sequence continues.
	s = openStore(t, dir)
	defer s.Close()
	err = s.Update(func(tx *Tx) error {
		if rv := tx.ResourceVersion(); rv != 5 {
			t.Errorf("ResourceVersion after reopen = %d, want 5", rv)
		}
		list, err := tx.List("Record")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Name != "a" || list[0].ResourceVersion != 4 || string(list[0].Object) != `{"n":10}` {
			t.Errorf("List = %+v", list)
		}
		if _, err := tx.Get("Record", "c"); !errors.Is(err, ErrNotFound) {
			t.Errorf("rolled-back resource: %v", err)
		}
		if rv, err := tx.Put("Record", "c", []byte(`{}`)); err != nil || rv != 6 {
			t.Errorf("Put after reopen = %d, %v", rv, err)
		}
		if _, err := tx.Put("", "x", nil); err == nil {
			t.Error("Put without a kind succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *Tx) error {
		_, err := tx.Put("Record", "d", []byte(`{}`))
		return err
	})
	if err == nil {
		t.Fatal("Put in a View succeeded")
	}
}
