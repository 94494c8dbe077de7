package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"
)

// memoryLimitRatio is the share of what the container leaves the server
// that --memory-limit auto gives the Go runtime: the rest is for what the
// runtime does not count (the store file's mapped pages, the kernel side
// of sockets).
const memoryLimitRatio = 0.9

// tofuRunMemory is what --memory-limit auto leaves in the container for
// each of the --workers tofu runs, the server's children: one run with
// its provider peaks at 94 to 113 MiB (docs/scaling.md).
const tofuRunMemory = 120 << 20

// serverShare is the part of a container's memory limit that is the
// server's own: the limit less tofuRunMemory for each worker, and at
// least half the limit.
func serverShare(limit uint64, workers int) uint64 {
	reserve := uint64(max(workers, 0)) * tofuRunMemory
	return limit - min(reserve, limit/2)
}

func addMemoryLimitFlag(fs *pflag.FlagSet, f *serveFlags) {
	fs.StringVar(&f.memoryLimit, "memory-limit", "auto", "soft limit of the Go runtime's memory, as GOMEMLIMIT: near it the server collects garbage more often instead of growing; a `SIZE` such as 270MiB, off, or auto: GOMEMLIMIT when it is set, else 90% of the container's memory limit (cgroup v2 or v1) less 120 MiB for each of the --workers tofu runs, else none")
}

// setMemoryLimit applies --memory-limit to the Go runtime and logs the
// limit in force. The server's heap holds, once it has started, mostly
// what it keeps (machine statuses, connections to the machines); without a
// limit the runtime lets garbage grow to as much again before it collects,
// and the peaks of start-up stay resident. A limit keeps the process within
// its container's memory at the cost of more collections near it.
func setMemoryLimit(spec string, workers int, log *slog.Logger) error {
	switch strings.TrimSpace(spec) {
	case "off": // as a size, over GOMEMLIMIT
		debug.SetMemoryLimit(math.MaxInt64)
		return nil
	case "auto", "":
		if os.Getenv("GOMEMLIMIT") != "" {
			log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
			return nil
		}
		own := func() (uint64, error) {
			limit, err := memlimit.FromCgroup()
			return serverShare(limit, workers), err
		}
		limit, err := memlimit.Set(memlimit.WithProvider(own), memlimit.WithRatio(memoryLimitRatio))
		switch {
		case errors.Is(err, memlimit.ErrNoCgroup):
			log.Debug("no memory limit: the server runs in no cgroup")
		case err != nil:
			log.Warn("no memory limit: the container's memory limit could not be read", "err", err)
		case limit == math.MaxInt64:
			log.Debug("no memory limit: the container's memory is not limited")
		default:
			log.Info("memory limit from the container's", "bytes", limit, "ratio", memoryLimitRatio, "tofu_workers", workers)
		}
		return nil
	}
	n, err := humanize.ParseBytes(spec)
	if err != nil || n == 0 || n > math.MaxInt64 {
		return fmt.Errorf("--memory-limit %q: want a size such as 270MiB, off or auto", spec)
	}
	debug.SetMemoryLimit(int64(n))
	log.Info("memory limit", "bytes", n)
	return nil
}
