package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTestClockFollowsItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	env := func(string) string { return path }
	if _, err := testClock(env); err == nil || !strings.Contains(err.Error(), envTestClock) {
		t.Fatalf("missing file: %v", err)
	}
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("yesterday")
	if _, err := testClock(env); err == nil || !strings.Contains(err.Error(), "not an RFC 3339 time") {
		t.Fatalf("bad time: %v", err)
	}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	write(start.Format(time.RFC3339))
	now, err := testClock(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := now(); got.Before(start) || got.After(start.Add(time.Minute)) {
		t.Fatalf("now = %s, want just after %s", got, start)
	}
	moved := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	write(moved.Format(time.RFC3339))
	deadline := time.Now().Add(5 * time.Second)
	for now().Before(moved) {
		if time.Now().After(deadline) {
			t.Fatalf("the clock did not move to %s: %s", moved, now())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := now(); got.After(moved.Add(time.Minute)) {
		t.Fatalf("now = %s, want just after %s", got, moved)
	}
	if none, err := testClock(func(string) string { return "" }); none != nil || err != nil {
		t.Fatalf("unset: a clock (%v) or %v", none != nil, err)
	}
}
