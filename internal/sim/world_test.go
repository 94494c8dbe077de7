package sim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenExistingNeverMakesACloud opens a cloud that Open made, and
// refuses a missing directory, an empty one and a file without making
// anything there.
func TestOpenExistingNeverMakesACloud(t *testing.T) {
	made := openStore(t)
	s, err := OpenExisting(made.Dir())
	if err != nil || s.Block() != made.Block() || s.Dir() != made.Dir() {
		t.Fatalf("OpenExisting(%s) = %+v, %v; want block %s", made.Dir(), s, err, made.Block())
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(tmp, "missing"), tmp, file} {
		if s, err := OpenExisting(dir); !errors.Is(err, ErrNoSimDir) {
			t.Errorf("OpenExisting(%s) = %+v, %v; want an error wrapping ErrNoSimDir", dir, s, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "missing")); !os.IsNotExist(err) {
		t.Errorf("OpenExisting made the missing directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, configFile)); !os.IsNotExist(err) {
		t.Errorf("OpenExisting wrote %s into an empty directory: %v", configFile, err)
	}
}

// TestServedFollowsTheClaim reports a store served exactly while a
// listener holds its block's claim address.
func TestServedFollowsTheClaim(t *testing.T) {
	s := openStore(t)
	if s.Served() {
		t.Fatalf("block %s served before anything claimed it", s.Block())
	}
	l, err := s.Block().Claim()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Served() {
		t.Errorf("block %s not served while claimed", s.Block())
	}
	l.Close()
	if s.Served() {
		t.Errorf("block %s served after its claim was released", s.Block())
	}
	// Asking never takes the block: it can still be claimed.
	l, err = s.Block().Claim()
	if err != nil {
		t.Fatalf("claim after Served: %v", err)
	}
	l.Close()
}
