package sim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFailNext(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TakeFault(); err != nil {
		t.Fatalf("no faults file: %v", err)
	}
	if err := s.FailNext(2); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.TakeFault(); !errors.Is(err, ErrInjected) {
			t.Fatalf("change %d: %v, want ErrInjected", i+1, err)
		}
	}
	if err := s.TakeFault(); err != nil {
		t.Fatalf("third change: %v, want none", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), FaultsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("faults file after its count was used up: %v", err)
	}
	os.WriteFile(filepath.Join(s.Dir(), FaultsFile), []byte("many\n"), 0o600)
	if err := s.TakeFault(); err == nil || errors.Is(err, ErrInjected) {
		t.Errorf("faults file with no count: %v, want an error that says so", err)
	}
	if err := s.FailNext(0); err != nil {
		t.Fatal(err)
	}
	if err := s.TakeFault(); err != nil {
		t.Errorf("after FailNext(0): %v", err)
	}
}
