package backend

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchState returns a JSON state of about size bytes.
func benchState(size int) []byte {
	head := stateJSON(1, "lin-bench", `{"pad":"`)
	pad := size - len(head) - len(`"}]}`)
	if pad < 0 {
		pad = 0
	}
	return stateJSON(1, "lin-bench", `{"pad":"`+strings.Repeat("p", pad)+`"}`)
}

type benchClient struct {
	b      *testing.B
	c      *http.Client
	url    string
	secret string
}

func (c *benchClient) do(method, path string, body []byte, md5sum string, want int) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	hr, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		c.b.Fatal(err)
	}
	hr.SetBasicAuth("editor", c.secret)
	if md5sum != "" {
		hr.Header.Set("Content-MD5", md5sum)
	}
	resp, err := c.c.Do(hr)
	if err != nil {
		c.b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		c.b.Fatalf("%s %s: %d, want %d", method, path, resp.StatusCode, want)
	}
}

func md5Header(b []byte) string {
	sum := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// BenchmarkStateCycle measures what tofu does for every apply: LOCK, GET,
// POST and UNLOCK, over real HTTP on loopback, with the default history of
// 50 versions. It reports cycles/s.
func BenchmarkStateCycle(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"1MB", 1 << 20}, {"10MB", 10 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			ts := startServer(b, Config{}, true)
			c := &benchClient{b: b, c: &http.Client{}, url: ts.URL(), secret: ts.tokens["editor"]}
			state := benchState(size.n)
			sum := md5Header(state)
			c.do("POST", "/tfstate/bench", state, sum, http.StatusOK)
			b.SetBytes(int64(len(state)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("lock-%d", i)
				lock := lockJSON(id, "bench@host")
				c.do("LOCK", "/tfstate/bench", lock, md5Header(lock), http.StatusOK)
				c.do("GET", "/tfstate/bench", nil, "", http.StatusOK)
				c.do("POST", "/tfstate/bench?ID="+id, state, sum, http.StatusOK)
				c.do("UNLOCK", "/tfstate/bench", lock, md5Header(lock), http.StatusOK)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// BenchmarkStatePost10MB measures POSTs of a 10 MB state over loopback,
// with the default history of 50, and, in the same run and on the same
// disk, writing and fsyncing the same bytes to a plain file. It reports
// both rates and their ratio. The content-md5 case sends Content-MD5 as
// tofu does, so the server hashes every body; plain sends none.
func BenchmarkStatePost10MB(b *testing.B) {
	for _, withMD5 := range []bool{true, false} {
		name := "plain"
		if withMD5 {
			name = "content-md5"
		}
		b.Run(name, func(b *testing.B) {
			ts := startServer(b, Config{}, true)
			c := &benchClient{b: b, c: &http.Client{}, url: ts.URL(), secret: ts.tokens["editor"]}
			state := benchState(10 << 20)
			sum := ""
			if withMD5 {
				sum = md5Header(state)
			}
			rawDir := ts.cfg.DataDir
			var post, raw time.Duration
			b.SetBytes(int64(len(state)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				c.do("POST", "/tfstate/bench", state, sum, http.StatusOK)
				post += time.Since(start)

				start = time.Now()
				writeSync(b, filepath.Join(rawDir, fmt.Sprintf("raw-%d", i)), state)
				raw += time.Since(start)
				if i > 0 {
					os.Remove(filepath.Join(rawDir, fmt.Sprintf("raw-%d", i-1)))
				}
			}
			mb := float64(b.N) * float64(len(state)) / 1e6
			b.ReportMetric(mb/post.Seconds(), "post-MB/s")
			b.ReportMetric(mb/raw.Seconds(), "raw-MB/s")
			b.ReportMetric(raw.Seconds()/post.Seconds(), "post/raw")
		})
	}
}

func writeSync(b *testing.B, path string, data []byte) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
