package backup_test

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// benchSize is the size of the benchmark's etcd snapshot.
const benchSize = 256 << 20

// snapshotStream is benchSize deterministic bytes, made as they are read:
// the benchmark never holds the snapshot.
func snapshotStream() io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{'e', 't', 'c', 'd'}), benchSize)
}

// BenchmarkWrite takes a 256 MB snapshot through Write (SHA-256, age, the
// store) into each store, against a plain copy of the same bytes through
// the same Store.Put in the same run, and measures the process's RSS
// growth during each: its high-water mark (reset before) over its RSS
// before. The S3 store runs with its default part size.
func BenchmarkWrite(b *testing.B) {
	b.Run("file", func(b *testing.B) { benchWrite(b, fileStore(b).Store) })
	b.Run("s3", func(b *testing.B) {
		srv := testenv.StartS3(b, "backups")
		b.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		b.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		st, err := backup.OpenStore(b.Context(), "s3://backups/bench", backup.StoreOptions{
			S3Endpoint: srv.Endpoint, S3Region: srv.Region, S3PathStyle: true, S3Insecure: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		benchWrite(b, st)
	})
}

func benchWrite(b *testing.B, st backup.Store) {
	ctx := b.Context()
	k := ageKeys(b)
	state := bytes.Repeat([]byte("tfstate "), 8<<10)
	var plain, enc, plainCPU, encCPU time.Duration
	var plainRSS, encRSS int64
	b.SetBytes(benchSize)
	for b.Loop() {
		d, cpu, rss := measure(b, func() {
			if err := st.Put(ctx, "bench/plain", snapshotStream()); err != nil {
				b.Fatal(err)
			}
		})
		plain, plainCPU, plainRSS = plain+d, plainCPU+cpu, max(plainRSS, rss)
		var m backup.Manifest
		d, cpu, rss = measure(b, func() {
			var err error
			if m, err = backup.Write(ctx, st, k, manifest("bench", time.Now()), snapshotStream(), state); err != nil {
				b.Fatal(err)
			}
		})
		enc, encCPU, encRSS = enc+d, encCPU+cpu, max(encRSS, rss)
		if m.Parts["snapshot"].Size != benchSize {
			b.Fatalf("the backup's snapshot holds %d bytes, want %d", m.Parts["snapshot"].Size, benchSize)
		}
		for _, key := range list(b, st, "bench/") {
			st.Delete(ctx, key)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * benchSize / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(plain), "plain-MB/s")
	b.ReportMetric(mbps(enc), "backup-MB/s")
	b.ReportMetric(mbps(enc)/mbps(plain), "ratio")
	b.ReportMetric(plainCPU.Seconds()/float64(b.N), "plain-cpu-s")
	b.ReportMetric(encCPU.Seconds()/float64(b.N), "backup-cpu-s")
	b.ReportMetric(float64(plainRSS)/(1<<20), "plain-rss-MB")
	b.ReportMetric(float64(encRSS)/(1<<20), "backup-rss-MB")
}

// measure runs f and returns its wall time, the process's CPU time (user
// and system) and the growth of its resident memory while it ran: VmHWM
// after (reset to the current RSS before, through /proc/self/clear_refs)
// less VmRSS before.
func measure(b *testing.B, f func()) (time.Duration, time.Duration, int64) {
	b.StopTimer()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("reset the RSS high-water mark: %v", err)
	}
	before := procStatus(b, "VmRSS")
	cpu0 := cpuTime(b)
	b.StartTimer()
	start := time.Now()
	f()
	d := time.Since(start)
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	growth := procStatus(b, "VmHWM") - before
	b.StartTimer()
	return d, cpu, growth
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads a field of /proc/self/status in bytes.
func procStatus(b *testing.B, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
