package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

func TestParseSimTimings(t *testing.T) {
	got, err := parseSimTimings("boot=200ms, reboot=1s,fallback=3s")
	if err != nil || got != (talosnode.Timings{Boot: 200 * time.Millisecond, Reboot: time.Second, Fallback: 3 * time.Second}) {
		t.Fatalf("%+v %v", got, err)
	}
	if got, err := parseSimTimings(""); err != nil || got != (talosnode.Timings{}) {
		t.Fatalf("empty: %+v %v", got, err)
	}
	for _, bad := range []string{"boot", "boot=fast", "boot=-1s", "nap=1s"} {
		if _, err := parseSimTimings(bad); err == nil || !strings.Contains(err.Error(), "--sim-timings") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
