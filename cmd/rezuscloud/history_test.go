package main

import (
	"strings"
	"testing"
)

// TestHistoryFlags: the history's settings are checked before the server
// starts, with a message that names the flag and what it wants; good ones
// pass.
func TestHistoryFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--history-step", "7m"}, want: "history step 7m0s: want whole minutes that divide 24h"},
		{args: []string{"--history-full", "10m"}, want: "history full resolution 10m0s: want at least 1h"},
		{args: []string{"--history-keep", "2h"}, want: "history keep 2h0m0s: want at least the full resolution's 24h0m0s"},
		{env: map[string]string{"REZUSCLOUD_HISTORY_SAMPLE_INTERVAL": "10ms"}, want: "--history-sample-interval 10ms: want at least 1s"},
		{args: []string{"--history-full", "6h", "--history-step", "5m", "--history-keep", "168h", "--talos-watch=false"}},
	} {
		_, err := parseServe(t, c.env, c.args...)
		if c.want == "" && err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v %v: %v, want an error saying %q", c.args, c.env, err, c.want)
		}
	}
}
