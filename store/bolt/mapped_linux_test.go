package bolt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/store"
)

// mappedKiB sums the resident KiB of this process's mappings of file.
func mappedKiB(t *testing.T, file string) float64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kib float64
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && f[5] == file
			continue
		}
		if in && len(f) == 3 && f[0] == "Rss:" {
			n, _ := strconv.ParseFloat(f[1], 64)
			kib += n
		}
	}
	return kib
}

// TestReleaseMappedDropsReadPages: the pages of the store's file that
// reads mapped leave the process's resident memory when the store
// releases them, and reads after that still see every byte.
func TestReleaseMappedDropsReadPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	const states, size = 300, 48 << 10
	state := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, size) }
	if err := s.Update(func(tx store.Tx) error {
		for i := range states {
			if _, err := tx.PutState(fmt.Sprintf("s%03d", i), state(i), store.StateMeta{Size: size}, 1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	readAll := func() {
		t.Helper()
		if err := s.View(func(tx store.Tx) error {
			for i := range states {
				// Read in place, as bbolt hands it out.
				b := tx.(*Tx).stateBucket(fmt.Sprintf("s%03d", i))
				if got := versionBytes(b, b.Get(keyCurrent)); !bytes.Equal(got, state(i)) {
					return fmt.Errorf("state s%03d: %d bytes, not the ones written", i, len(got))
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	readAll()
	path, err := filepath.EvalSymlinks(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	before := mappedKiB(t, path)
	if before < states*size/1024/2 {
		t.Fatalf("reading %d states of %d KiB mapped only %.0f KiB of the file: the measure is wrong", states, size>>10, before)
	}
	if err := s.ReleaseMapped(); err != nil {
		t.Fatal(err)
	}
	if after := mappedKiB(t, path); after > before/10 {
		t.Errorf("after ReleaseMapped %.0f KiB of the file stay mapped (%.0f KiB before)", after, before)
	}
	readAll()
}

// TestOpenReleasesWalkedPages: bbolt's walk of every page on open (the
// freelist is not written, see Open) leaves none of the file mapped.
func TestOpenReleasesWalkedPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	const states = 1000
	if err := s.Update(func(tx store.Tx) error {
		for i := range states {
			data := bytes.Repeat([]byte{'x'}, 3000+i) // a leaf page of its own each
			if _, err := tx.PutState(fmt.Sprintf("s%04d", i), data, store.StateMeta{Size: int64(len(data))}, 1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openStore(t, dir)
	path, err := filepath.EvalSymlinks(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if kib := mappedKiB(t, path); kib > 256 {
		t.Errorf("after Open %.0f KiB of the file are mapped, want the walk's pages released", kib)
	}
}

// TestStateReleasesItsPages: a state read with State in a
// read transaction leaves none of its pages mapped; in a write
// transaction, where a state just written lives in Go's memory, it is
// read as written and left alone.
func TestStateReleasesItsPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	const states, size = 100, 64 << 10
	state := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, size) }
	if err := s.Update(func(tx store.Tx) error {
		for i := range states {
			name := fmt.Sprintf("s%03d", i)
			if _, err := tx.PutState(name, state(i), store.StateMeta{Size: size}, 1); err != nil {
				return err
			}
			if got := store.CurrentState(tx, name); !bytes.Equal(got, state(i)) {
				return fmt.Errorf("state %s read back in its write transaction: %d bytes, not the ones written", name, len(got))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseMapped(); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx store.Tx) error {
		for i := range states {
			if got := store.CurrentState(tx, fmt.Sprintf("s%03d", i)); !bytes.Equal(got, state(i)) {
				return fmt.Errorf("state s%03d: %d bytes, not the ones written", i, len(got))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	path, err := filepath.EvalSymlinks(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if kib := mappedKiB(t, path); kib > states*size/1024/4 {
		t.Errorf("after reading %d states of %d KiB, %.0f KiB of the file are mapped", states, size>>10, kib)
	}
}
