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
		if err := setMemoryLimit(c.spec, log); err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("--memory-limit %s: the runtime's limit is %d, want %d", c.spec, got, c.want)
		}
	}
	for _, bad := range []string{"lots", "-5MiB", "0"} {
		err := setMemoryLimit(bad, log)
		if err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("--memory-limit %s: err %v, want one that names the flag", bad, err)
		}
	}

	// auto leaves a limit given by GOMEMLIMIT alone.
	debug.SetMemoryLimit(123 << 20)
	t.Setenv("GOMEMLIMIT", "123MiB")
	if err := setMemoryLimit("auto", log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Errorf("auto with GOMEMLIMIT set: the limit is %d, want GOMEMLIMIT's %d", got, 123<<20)
	}
}
