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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// webhookSecret signs the generic hooks.
const webhookSecret = "bench-push-webhook-secret-0123456789"

func TestMain(m *testing.M) {
	code := m.Run()
	servertest.RemoveBuilds()
	os.Exit(code)
}

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

// newRig pushes the examples under clusters/, starts the server with the
// default settings plus args (and -debounce), and waits for the first
// commit to be applied.
func newRig(b *testing.B, args ...string) *rig {
	b.Helper()
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
	r.srv = &server{b: b, Server: servertest.Start(b, servertest.Options{
		Repo: r.repo, Path: "clusters", SimCloud: true,
		Args: append([]string{"--log-format", "json"}, args...),
		Env:  []string{"REZUSCLOUD_WEBHOOK_SECRET=" + webhookSecret},
	})}
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
			want := schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}
			if r.workers == 2 {
				want = schema.PlanSummary{Destroy: 1, Machines: schema.PlanCounts{Destroy: 1}}
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

// server is a running `rezuscloud serve` (see servertest).
type server struct {
	*servertest.Server
	b *testing.B
}

// waitCommit waits until the Commit of sha is done and fails unless it
// succeeded.
func (s *server) waitCommit(sha string) schema.Commit {
	s.b.Helper()
	c := s.WaitCommit(sha)
	if c.Status.Phase != schema.CommitSucceeded {
		s.b.Fatalf("commit %s: %s: %s\n%s", sha[:12], c.Status.Phase, c.Status.Message, s.Tail(50))
	}
	return c
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
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/hooks/generic", bytes.NewReader(body))
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
	resp, err := http.Get(s.URL() + "/metrics")
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
