package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestCreateDelay: with a delay set, a create waits it out, or ends at
// once with an error when its request is cancelled; cleared, it does not
// wait.
func TestCreateDelay(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitCreate(context.Background()); err != nil {
		t.Fatalf("without a delay: %v", err)
	}
	if err := s.SetCreateDelay(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.WaitCreate(context.Background()); err != nil || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("with a delay of 200ms: %v after %s", err, time.Since(start))
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), WaitingFile)); err != nil {
		t.Errorf("a create that waited left no %s: %v", WaitingFile, err)
	}
	if err := s.SetCreateDelay(time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := s.WaitCreate(ctx); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "made nothing") {
		t.Fatalf("a cancelled create: %v", err)
	}
	if err := s.SetCreateDelay(0); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitCreate(context.Background()); err != nil {
		t.Fatalf("with the delay cleared: %v", err)
	}
}
