package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

func TestSetMemoryLimit(t *testing.T) {
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv("GOMEMLIMIT", "")
	for _, c := range []struct {
		spec string
		want int64
	}{{"270MiB", 270 << 20}, {"300MB", 300_000_000}, {"off", math.MaxInt64}, {"1GiB", 1 << 30}} {
		if err := setMemoryLimit(c.spec, 2, log); err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("--memory-limit %s: the runtime's limit is %d, want %d", c.spec, got, c.want)
		}
	}
	for _, bad := range []string{"lots", "-5MiB", "0"} {
		err := setMemoryLimit(bad, 2, log)
		if err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("--memory-limit %s: err %v, want one that names the flag", bad, err)
		}
	}

	// auto leaves a limit given by GOMEMLIMIT alone.
	debug.SetMemoryLimit(123 << 20)
	t.Setenv("GOMEMLIMIT", "123MiB")
	if err := setMemoryLimit("auto", 2, log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Errorf("auto with GOMEMLIMIT set: the limit is %d, want GOMEMLIMIT's %d", got, 123<<20)
	}
	// A size or off given to the flag goes over GOMEMLIMIT.
	if err := setMemoryLimit("off", 2, log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("off with GOMEMLIMIT set: the limit is %d, want none", got)
	}
}

func TestServerShare(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		limit   uint64
		workers int
		want    uint64
	}{
		{1024 * mib, 2, 784 * mib},  // the chart's limit and workers
		{2048 * mib, 4, 1568 * mib}, // 4 × 120 MiB for tofu
		{300 * mib, 2, 150 * mib},   // never more than half for tofu
		{1024 * mib, 0, 1024 * mib},
	} {
		if got := serverShare(c.limit, c.workers); got != c.want {
			t.Errorf("serverShare(%d MiB, %d workers) = %d MiB, want %d MiB", c.limit/mib, c.workers, got/mib, c.want/mib)
		}
	}
}
