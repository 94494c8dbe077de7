package kubeapi_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// children are the control plane's processes in the order Start starts
// them, each once the one before it answers.
var children = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// idle is how long a started control plane runs before its processes'
// resident memory is read.
const idle = 10 * time.Second

// BenchmarkControlPlane starts the control plane of one simulated tenant
// from a new secrets bundle, and reports what it costs: the time from the
// call to Start until it returns (every process answering), the time each
// process took to answer (from its own start, read from /proc/PID/stat,
// to the next one's start, which Start makes once it answers; to Start's
// return for the last), and each process's resident memory (VmRSS) after
// it has run idle for 10 s. Each iteration starts a control plane in a
// new directory and stops it.
//
//	go test -run '^$' -bench ControlPlane -benchtime 1x -count 3 ./internal/sim/kubeapi/
func BenchmarkControlPlane(b *testing.B) {
	bin := testenv.KubeBin(b)
	_, s := kubetest.Bundle(b)
	ready := map[string]time.Duration{}
	rss := map[string]int{}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		var r [2]byte
		_, _ = rand.Read(r[:])
		o := kubeapi.Options{Bin: bin, Dir: b.TempDir(), Address: netip.AddrFrom4([4]byte{127, 252, r[0], r[1]%250 + 1}),
			CA: s.Certs.K8s, ServiceAccountKey: s.Certs.K8sServiceAccount.Key}
		called := uptimeTicks(b)
		start := time.Now()
		cp, err := kubeapi.Start(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		returned := uptimeTicks(b)
		pids := cp.Pids()
		if len(pids) != len(children) {
			cp.Stop()
			b.Fatalf("processes %v, want %v", pids, children)
		}
		started := make([]int64, len(children)+1)
		for i, name := range children {
			started[i] = startTicks(b, pids[name])
		}
		started[len(children)] = returned
		if started[0] < called {
			cp.Stop()
			b.Fatalf("etcd started at tick %d, before the call at %d", started[0], called)
		}
		for i, name := range children {
			ready[name] += ticks(started[i+1] - started[i])
		}
		b.StopTimer()
		time.Sleep(idle)
		for _, name := range children {
			kib, err := vmRSS(pids[name])
			if err != nil {
				cp.Stop()
				b.Fatalf("%s: %v", name, err)
			}
			rss[name] += kib
		}
		cp.Stop()
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(total.Seconds()/n, "ready-s")
	sum := 0
	for _, name := range children {
		b.ReportMetric(ready[name].Seconds()/n, name+"-ready-s")
		b.ReportMetric(float64(rss[name])/1024/n, name+"-rss-MiB")
		sum += rss[name]
	}
	b.ReportMetric(float64(sum)/1024/n, "rss-MiB")
}

// uptimeTicks is the time since boot in clock ticks (1/100 s), the unit
// of a process's start time in /proc/PID/stat.
func uptimeTicks(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		b.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		b.Fatal(err)
	}
	return int64(up * 100)
}

// startTicks is when process pid started, in clock ticks since boot
// (field 22 of /proc/PID/stat).
func startTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses, start
	// with field 3.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	t, err := strconv.ParseInt(f[22-3], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

func ticks(n int64) time.Duration { return time.Duration(n) * 10 * time.Millisecond }

// vmRSS is the resident memory of process pid in KiB.
func vmRSS(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
