package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// parseSimTimings reads --sim-timings: comma-separated NAME=DURATION pairs
// (boot, install, reboot, upgrade, reset, fallback, log) that override the
// simulated nodes' default stage durations; "" keeps them all.
func parseSimTimings(s string) (talosnode.Timings, error) {
	var t talosnode.Timings
	fields := map[string]*time.Duration{
		"boot": &t.Boot, "install": &t.Install, "reboot": &t.Reboot, "upgrade": &t.Upgrade,
		"reset": &t.Reset, "fallback": &t.Fallback, "log": &t.LogInterval,
	}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		p := fields[strings.TrimSpace(name)]
		if !ok || p == nil {
			return t, fmt.Errorf("--sim-timings %q: want NAME=DURATION pairs with NAME one of boot, install, reboot, upgrade, reset, fallback, log", kv)
		}
		d, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil || d <= 0 {
			return t, fmt.Errorf("--sim-timings %q: %q is not a positive duration such as 500ms", kv, value)
		}
		*p = d
	}
	return t, nil
}
