package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Bin returns the path of the real S3-compatible server, versitygw:
// $REZUSCLOUD_S3_BIN, or what scripts/s3.sh caches, building it the first
// time (about a minute on 2 cores).
func S3Bin(t TB) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(Root(), "scripts", "s3.sh")).Output()
	if err != nil {
		t.Fatalf("no S3 server: set REZUSCLOUD_S3_BIN or run `make s3` (%v)", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		t.Fatalf("no S3 server: scripts/s3.sh printed nothing; run `make s3`")
	}
	return lines[len(lines)-1]
}

// S3 is a real S3-compatible server (versitygw, its posix backend over a
// temporary directory) on loopback, with one bucket, for one test.
type S3 struct {
	Endpoint  string // 127.0.0.1:PORT, plain http
	Region    string
	Bucket    string
	AccessKey string
	SecretKey string
	Dir       string // the posix backend's directory: the bucket is Dir/Bucket
}

// StartS3 starts versitygw on a free loopback port, creates bucket, and
// stops the server when the test ends. The credentials are random and
// reach the server through its environment.
func StartS3(t testing.TB, bucket string) *S3 {
	t.Helper()
	bin := S3Bin(t)
	s := &S3{Region: "us-east-1", Bucket: bucket, AccessKey: randomHex(10), SecretKey: randomHex(20), Dir: t.TempDir()}
	// A free port can be taken by another process before versitygw binds
	// it: then versitygw exits and another port is tried.
	var err error
	for range 3 {
		if err = s.start(t, bin); err == nil {
			return s
		}
	}
	t.Fatalf("start versitygw: %v", err)
	return nil
}

func (s *S3) start(t testing.TB, bin string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Endpoint = ln.Addr().String()
	ln.Close()
	out := &syncBuffer{}
	cmd := exec.Command(bin, "--port", s.Endpoint, "--quiet", "posix", s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey, "VGW_REGION="+s.Region)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	if err := s.makeBucket(exited); err != nil {
		stop()
		return fmt.Errorf("%v; versitygw said: %s", err, out.String())
	}
	t.Cleanup(stop)
	return nil
}

// makeBucket creates the bucket as soon as the server answers.
func (s *S3) makeBucket(exited <-chan struct{}) error {
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1, // this loop retries, and sees an exit between tries
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw exited on %s", s.Endpoint)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on %s did not create bucket %s in 30s: %v", s.Endpoint, s.Bucket, err)
		}
	}
}

// Client returns a minio-go client of the server, path-style, plain http.
func (s *S3) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer collects a process's output, written from exec's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
