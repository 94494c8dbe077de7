package push

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// webhookSecret signs the generic hooks.
const webhookSecret = "bench-push-webhook-secret-0123456789"

// waitTimeout bounds the wait for one commit; the polling case waits up to
// a whole poll interval first.
const waitTimeout = 3 * time.Minute

// rig is a git daemon serving the example manifests, a work tree that
// pushes to it and a `rezuscloud serve` that follows it.
type rig struct {
	b       *testing.B
	repo    string
	work    *gittest.Workdir
	srv     *server
	workers int // production's worker count in the work tree
	// lastReceived is when the server received the last commit: the time
	// of the poll or hook that found it.
	lastReceived time.Time
}

// newRig builds the server, pushes the examples under clusters/, starts
// the server with the default settings plus args (and -debounce), and
// waits for the first commit to be applied.
func newRig(b *testing.B, args ...string) *rig {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "rezuscloud")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/rezuscloud")
	build.Dir = testenv.Root()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/rezuscloud: %v\n%s", err, out)
	}
	d := gittest.NewDaemon(b)
	d.CreateBare("acme/infra.git")
	r := &rig{b: b, repo: d.URL("acme/infra.git"), workers: 2}
	r.work = gittest.NewWorkdir(b, r.repo)
	err := fs.WalkDir(examples.FS, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		body, err := fs.ReadFile(examples.FS, p)
		if err != nil {
			return err
		}
		r.work.Write("clusters/"+p, string(body))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	first := r.work.Commit("Example tenants")
	r.work.Push()

	if *debounce != "" {
		args = append(args, "--debounce", *debounce)
	}
	r.srv = startServer(b, bin, append([]string{
		"--data", filepath.Join(b.TempDir(), "data"),
		"--repo", r.repo, "--path", "clusters",
		"--tofu", testenv.Tofu(b), "--provider-mirror", testenv.ProviderMirror(b), "--sim-cloud",
		"--log-format", "json",
	}, args...))
	b.Cleanup(r.srv.stop)
	// The first commit arrives with the server's first poll.
	r.lastReceived = r.srv.waitCommit(first).Status.Timings.ReceivedAt
	return r
}

var countRE = regexp.MustCompile(`(?s)(name: workers\n.*?count: )(\d+)`)

// pushAndWait scales production's workers up or down by one, pushes, and,
// with hook, posts a signed generic webhook at once. It waits for the
// Commit to succeed and returns what it measured.
func (r *rig) pushAndWait(hook bool) sample {
	r.b.Helper()
	if r.workers == 2 {
		r.workers = 3
	} else {
		r.workers = 2
	}
	path := filepath.Join(r.work.Dir(), "clusters", "production", "nodegroups.yaml")
	body, err := os.ReadFile(path)
	if err != nil {
		r.b.Fatal(err)
	}
	if !countRE.Match(body) {
		r.b.Fatalf("no workers count in %s", path)
	}
	r.work.Write("clusters/production/nodegroups.yaml", countRE.ReplaceAllString(string(body), fmt.Sprintf("${1}%d", r.workers)))
	sha := r.work.Commit(fmt.Sprintf("Scale production workers to %d", r.workers))
	before := r.srv.tofuSeconds()

	start := time.Now()
	r.work.Push()
	pushed := time.Now()
	if hook {
		r.srv.hook(r.repo)
	}
	c := r.srv.waitCommit(sha)
	r.lastReceived = c.Status.Timings.ReceivedAt
	tofu := r.srv.tofuSeconds()
	for k, v := range before {
		tofu[k] -= v
	}
	for k, v := range tofu {
		if v <= 0 {
			delete(tofu, k)
		}
	}
	s := sample{
		push:     pushed.Sub(start),
		total:    c.Status.Timings.FinishedAt.Sub(pushed),
		received: c.Status.Timings.ReceivedAt.Sub(pushed),
		tofu:     tofu,
	}
	for _, t := range c.Status.Tenants {
		if t.Tenant == "production" {
			s.tenant = t.FinishedAt.Sub(t.StartedAt)
			want := schema.PlanSummary{Add: 1}
			if r.workers == 2 {
				want = schema.PlanSummary{Destroy: 1}
			}
			if t.Plan != want {
				r.b.Fatalf("commit %s: production plan %s, want %s", sha[:12], t.Plan, want)
			}
		}
	}
	if s.tenant == 0 {
		r.b.Fatalf("commit %s has no run of production", sha[:12])
	}
	return s
}

// server is a running `rezuscloud serve`.
type server struct {
	b    *testing.B
	cmd  *exec.Cmd
	url  string
	done chan struct{}

	mu  sync.Mutex
	log []string // its last lines
}

func startServer(b *testing.B, bin string, args []string) *server {
	b.Helper()
	s := &server{b: b, done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir(), "REZUSCLOUD_WEBHOOK_SECRET=" + webhookSecret}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" && rec.Addr != "" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
			if rec.Msg == "request" {
				continue
			}
			s.mu.Lock()
			s.log = append(s.log, line)
			if len(s.log) > 50 {
				s.log = s.log[1:]
			}
			s.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		s.cmd.Wait()
	}()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case <-s.done:
		b.Fatalf("rezuscloud serve exited before serving:\n%s", s.tail())
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		b.Fatalf("rezuscloud serve did not start serving:\n%s", s.tail())
	}
	return s
}

func (s *server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

// stop sends SIGTERM and waits for the server to exit.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		s.cmd.Process.Kill()
		<-s.done
		s.b.Errorf("rezuscloud serve did not exit within 2 minutes of SIGTERM")
	}
}

// get fetches path and decodes a 200 answer into v; it returns the code.
func (s *server) get(path string, v any) int {
	s.b.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		s.b.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.b.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			s.b.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

// waitCommit waits until the Commit of sha is done and fails unless it
// succeeded.
func (s *server) waitCommit(sha string) schema.Commit {
	s.b.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var c schema.Commit
		if code := s.get("/api/v1/commits/"+sha, &c); code == http.StatusOK && c.Status.Phase.Done() {
			if c.Status.Phase != schema.CommitSucceeded {
				s.b.Fatalf("commit %s: %s: %s\n%s", sha[:12], c.Status.Phase, c.Status.Message, s.tail())
			}
			return c
		}
		select {
		case <-s.done:
			s.b.Fatalf("rezuscloud serve exited:\n%s", s.tail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.b.Fatalf("commit %s not done within %v:\n%s", sha[:12], waitTimeout, s.tail())
		}
	}
}

// hook posts a signed generic webhook for the main branch of repo.
func (s *server) hook(repo string) {
	s.b.Helper()
	body, err := json.Marshal(map[string]string{"repository": repo, "ref": "refs/heads/main"})
	if err != nil {
		s.b.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte(webhookSecret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, s.url+"/hooks/generic", bytes.NewReader(body))
	if err != nil {
		s.b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !bytes.Contains(answer, []byte(`"accepted"`)) {
		s.b.Fatalf("POST /hooks/generic: %d %s, want 202 accepted", resp.StatusCode, answer)
	}
}

// tofuSeconds reads rezuscloud_tofu_duration_seconds_sum by command from
// /metrics.
func (s *server) tofuSeconds() map[string]float64 {
	s.b.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		s.b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.b.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const prefix = `rezuscloud_tofu_duration_seconds_sum{command="`
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		cmd, found := strings.CutPrefix(name, prefix)
		if !ok || !found {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			s.b.Fatalf("/metrics: %s: %v", sc.Text(), err)
		}
		out[strings.TrimSuffix(cmd, `"}`)] = f
	}
	if err := sc.Err(); err != nil {
		s.b.Fatal(err)
	}
	return out
}
