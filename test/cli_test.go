package test

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestCLI runs the scripts in testdata/cli: the real rezusctl against the
// real `rezuscloud serve --dir`, which reconciles a copy of the examples
// with the real tofu binary and the simulated provider. Each script gets
// its own server, data dir and tokens.
//
// Besides testscript's own commands, the scripts have:
//
//	serve [FLAGS]           start rezuscloud serve on the manifests in $WORK/manifests,
//	                        with the tokens file; sets REZUSCLOUD_SERVER
//	restart                 stop the server (SIGTERM) and start it again on the same address
//	waitcommit [PHASE]      wait until the server has handled the source's newest revision,
//	                        one that the previous waitcommit did not see; with PHASE, its
//	                        Commit must end in that phase
//	waitphase PHASE         wait until every tenant is in PHASE (active: each machine
//	                        its node groups ask for exists and is ready)
//	jsonpath PATH...        evaluate each PATH (.a.b[0].c, [*] for every item) on the last
//	                        stdout and print the results, one per line
//	jsonpath -set VAR PATH  store the first result in VAR instead
//	bg NAME PROG ARGS...    run a program in the background, stdout and stderr to
//	                        $WORK/NAME.stdout and $WORK/NAME.stderr
//	waitfile FILE REGEXP [N]  wait until FILE has N (default 1) lines matching REGEXP
//	stop NAME               interrupt a bg program (SIGINT); it must exit 0 (! stop: non-zero);
//	                        its output becomes stdout and stderr
//
// The environment has REZUSCLOUD_TOKEN_FILE=$WORK/admin.token; $WORK/view.token
// holds a token of role view.
func TestCLI(t *testing.T) {
	bins := cliBinaries(t)
	tofu := testenv.Tofu(t)
	mirror := testenv.ProviderMirror(t)
	examples := filepath.Join(testenv.Root(), "examples")
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "cli"),
		Setup: func(env *testscript.Env) error {
			work := env.WorkDir
			env.Setenv("PATH", bins+string(os.PathListSeparator)+os.Getenv("PATH"))
			env.Setenv("HOME", filepath.Join(work, "home"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(work, "home", ".config"))
			env.Setenv("TOFU", tofu)
			env.Setenv("MIRROR", mirror)
			env.Setenv("REZUSCLOUD_TOKEN_FILE", filepath.Join(work, "admin.token"))
			if err := copyManifests(examples, filepath.Join(work, "manifests")); err != nil {
				return err
			}
			return cliTokens(filepath.Join(bins, "rezuscloud"), work)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"serve":      cliServe,
			"restart":    cliRestart,
			"waitcommit": cliWaitCommit,
			"waitphase":  cliWaitPhase,
			"jsonpath":   cliJSONPath,
			"bg":         cliBackground,
			"waitfile":   cliWaitFile,
			"stop":       cliStop,
		},
		RequireUniqueNames: true,
	})
}

// cliBinaries returns a directory that holds rezusctl and rezuscloud, as
// servertest builds them (or $REZUSCTL_BIN and $REZUSCLOUD_BIN).
func cliBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, p := range map[string]string{"rezusctl": servertest.CLI(t), "rezuscloud": servertest.Binary(t)} {
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// copyManifests copies the YAML files of the examples, keeping their
// directories.
func copyManifests(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() && examples.IsCloud(filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
}

// cliTokens creates an admin and a view token with `rezuscloud token
// create`, writes the tokens file and one file per token.
func cliTokens(bin, work string) error {
	var lines []string
	for _, tk := range []struct{ name, role string }{{"admin", "admin"}, {"view", "view"}} {
		out, err := exec.Command(bin, "token", "create", "cli-"+tk.name, "--role", tk.role).Output()
		if err != nil {
			return fmt.Errorf("token create: %v", err)
		}
		// "# token …", the token, "# add this line …", the line.
		parts := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(parts) != 4 {
			return fmt.Errorf("token create printed %d lines, want 4", len(parts))
		}
		if err := os.WriteFile(filepath.Join(work, tk.name+".token"), []byte(parts[1]+"\n"), 0o600); err != nil {
			return err
		}
		lines = append(lines, parts[3])
	}
	return os.WriteFile(filepath.Join(work, "tokens"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// cliTimeout bounds every wait of a script. Generous: the machine's cores
// are shared and a first apply runs tofu init.
const cliTimeout = 180 * time.Second

// cliServer is the server of one script.
type cliServer struct {
	*servertest.Server
	// seen is the revision the last waitcommit returned on.
	seen string
}

// scriptTB is a script as servertest needs a test to be.
type scriptTB struct{ *testscript.TestScript }

func (scriptTB) Helper()            {}
func (s scriptTB) Cleanup(f func()) { s.Defer(f) }
func (s scriptTB) TempDir() string {
	dir, err := os.MkdirTemp(s.Getenv("WORK"), "tmp")
	s.Check(err)
	return dir
}

func cliServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! serve")
	}
	if _, ok := cliServers.Load(ts); ok {
		ts.Fatalf("serve: already serving")
	}
	work := ts.Getenv("WORK")
	log, err := os.Create(filepath.Join(work, "server.log"))
	if err != nil {
		ts.Fatalf("serve: %v", err)
	}
	// Deferred first, so that it runs after the server's own cleanup,
	// which stops it.
	ts.Defer(func() {
		log.Close()
		cliServers.Delete(ts)
	})
	s := &cliServer{Server: servertest.New(scriptTB{ts}, servertest.Options{
		Binary: lookPath(ts, "rezuscloud"), Data: filepath.Join(work, "data"), Dir: filepath.Join(work, "manifests"),
		Tofu: ts.Getenv("TOFU"), TokensFile: filepath.Join(work, "tokens"), SimCloud: true,
		Args: append([]string{"--debounce", "0s", "--shutdown-grace", "20s"}, args...),
		Env:  []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME")},
		Log:  log,
	})}
	s.Start()
	ts.Setenv("REZUSCLOUD_SERVER", s.URL())
	cliServers.Store(ts, s)
}

// cliServers maps a script to its server.
var cliServers sync.Map

func cliServerOf(ts *testscript.TestScript) *cliServer {
	v, ok := cliServers.Load(ts)
	if !ok {
		ts.Fatalf("no server: run serve first")
	}
	return v.(*cliServer)
}

func lookPath(ts *testscript.TestScript, name string) string {
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	ts.Fatalf("%s is not on PATH", name)
	return ""
}

func cliRestart(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: restart")
	}
	s := cliServerOf(ts)
	s.Stop()
	s.Start()
}

// cliGet GETs path from the script's server as admin and decodes the JSON
// answer into out.
func cliGet(ts *testscript.TestScript, s *cliServer, path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, s.URL()+path, nil)
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(ts.Getenv("WORK"), "admin.token"))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}

// cliWaitCommit waits until the server has handled the newest revision of
// its source: the revision differs from the one the previous waitcommit
// returned on, and its Commit is in a final phase.
func cliWaitCommit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 {
		ts.Fatalf("usage: waitcommit [PHASE]")
	}
	s := cliServerOf(ts)
	deadline := time.Now().Add(cliTimeout)
	var last string
	for time.Now().Before(deadline) {
		var st struct {
			Source struct {
				Revision string `json:"revision"`
			} `json:"source"`
		}
		if err := cliGet(ts, s, "/api/v1/status", &st); err != nil {
			last = err.Error()
		} else if rev := st.Source.Revision; rev != "" && rev != s.seen {
			var c schema.Commit
			if err := cliGet(ts, s, "/api/v1/commits/"+strings.ReplaceAll(rev, ":", "-"), &c); err != nil {
				last = err.Error()
			} else if c.Status.Phase.Done() {
				s.seen = rev
				ts.Logf("commit %s: %s", rev, c.Status.Phase)
				if len(args) == 1 && string(c.Status.Phase) != args[0] {
					var errs []string
					for _, r := range c.Status.Tenants {
						if r.Error != "" {
							errs = append(errs, r.Tenant+": "+r.Error)
						}
					}
					ts.Fatalf("waitcommit: commit %s is %s, want %s\n%s", rev, c.Status.Phase, args[0], strings.Join(errs, "\n"))
				}
				return
			} else {
				last = "commit " + rev + " is " + string(c.Status.Phase)
			}
		} else {
			last = "no new revision yet"
		}
		time.Sleep(100 * time.Millisecond)
	}
	ts.Fatalf("waitcommit: timed out (%s); see server.log", last)
}

// cliWaitPhase waits until every tenant the server holds is in the phase
// given.
func cliWaitPhase(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitphase PHASE")
	}
	s := cliServerOf(ts)
	deadline := time.Now().Add(cliTimeout)
	var last string
	for time.Now().Before(deadline) {
		var list struct {
			Items []schema.Tenant `json:"items"`
		}
		if err := cliGet(ts, s, "/api/v1/tenants", &list); err != nil {
			last = err.Error()
		} else {
			var off []string
			for _, t := range list.Items {
				if string(t.Status.Phase) != args[0] {
					m := t.Status.Machines
					off = append(off, fmt.Sprintf("%s is %s with %d of %d machines ready", t.Metadata.Name, t.Status.Phase, m.Ready, m.Desired))
				}
			}
			if len(list.Items) > 0 && len(off) == 0 {
				return
			}
			last = strings.Join(off, "; ")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ts.Fatalf("waitphase %s: timed out (%s); see server.log", args[0], last)
}

// cliJSONPath evaluates paths on the last stdout.
func cliJSONPath(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! jsonpath")
	}
	setVar := ""
	if len(args) == 3 && args[0] == "-set" {
		setVar, args = args[1], args[2:]
	}
	if len(args) == 0 {
		ts.Fatalf("usage: jsonpath [-set VAR PATH | PATH...]")
	}
	var doc any
	if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &doc); err != nil {
		ts.Fatalf("jsonpath: stdout is not JSON: %v", err)
	}
	var vals []string
	for _, p := range args {
		v, err := evalPath(doc, p)
		if err != nil {
			ts.Fatalf("jsonpath %s: %v", p, err)
		}
		vals = append(vals, v...)
	}
	if setVar != "" {
		if len(vals) == 0 {
			ts.Fatalf("jsonpath %s: no value to set %s to", args[0], setVar)
		}
		ts.Setenv(setVar, vals[0])
		return
	}
	w := ts.Stdout()
	for _, v := range vals {
		fmt.Fprintln(w, v)
	}
}

var pathTokenRE = regexp.MustCompile(`^\.([A-Za-z0-9_-]+)|^\[(\*|\d+)\]`)

// evalPath follows a path of .key, [N] and [*] steps; leaves print as
// JSON, strings without quotes.
func evalPath(doc any, path string) ([]string, error) {
	cur := []any{doc}
	for rest := path; rest != ""; {
		m := pathTokenRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot parse %q", rest)
		}
		rest = rest[len(m[0]):]
		var next []any
		for _, v := range cur {
			switch {
			case m[1] != "":
				obj, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf(".%s of a %T", m[1], v)
				}
				if x, ok := obj[m[1]]; ok {
					next = append(next, x)
				}
			case m[2] == "*":
				arr, ok := v.([]any)
				if !ok {
					return nil, fmt.Errorf("[*] of a %T", v)
				}
				next = append(next, arr...)
			default:
				arr, ok := v.([]any)
				i, _ := strconv.Atoi(m[2])
				if !ok || i >= len(arr) {
					return nil, fmt.Errorf("[%d] out of range", i)
				}
				next = append(next, arr[i])
			}
		}
		cur = next
	}
	out := make([]string, 0, len(cur))
	for _, v := range cur {
		if s, ok := v.(string); ok {
			out = append(out, s)
			continue
		}
		b, _ := json.Marshal(v)
		out = append(out, string(b))
	}
	return out, nil
}

// cliBg is a program started by bg.
type cliBg struct {
	cmd     *exec.Cmd
	done    chan struct{}
	outPath string
	errPath string
}

var cliBgs sync.Map // "script\x00name" -> *cliBg

func cliBgKey(ts *testscript.TestScript, name string) string {
	return fmt.Sprintf("%p\x00%s", ts, name)
}

func cliBackground(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: bg NAME PROG ARGS...")
	}
	name := args[0]
	work := ts.Getenv("WORK")
	b := &cliBg{outPath: filepath.Join(work, name+".stdout"), errPath: filepath.Join(work, name+".stderr"), done: make(chan struct{})}
	stdout, err := os.Create(b.outPath)
	ts.Check(err)
	stderr, err := os.Create(b.errPath)
	ts.Check(err)
	b.cmd = exec.Command(lookPath(ts, args[1]), args[2:]...)
	b.cmd.Dir = ts.Getenv("WORK")
	for _, k := range []string{"PATH", "HOME", "XDG_CONFIG_HOME", "REZUSCLOUD_SERVER", "REZUSCLOUD_TOKEN_FILE"} {
		b.cmd.Env = append(b.cmd.Env, k+"="+ts.Getenv(k))
	}
	b.cmd.Stdout, b.cmd.Stderr = stdout, stderr
	ts.Check(b.cmd.Start())
	go func() {
		b.cmd.Wait()
		stdout.Close()
		stderr.Close()
		close(b.done)
	}()
	cliBgs.Store(cliBgKey(ts, name), b)
	ts.Defer(func() {
		b.cmd.Process.Kill()
		<-b.done
		cliBgs.Delete(cliBgKey(ts, name))
	})
}

func cliWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitfile FILE REGEXP [N]")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	want := 1
	if len(args) == 3 {
		want, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	deadline := time.Now().Add(cliTimeout)
	var got int
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(ts.MkAbs(args[0]))
		if err == nil {
			if got = len(re.FindAll(b, -1)); got >= want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(ts.MkAbs(args[0]))
	ts.Fatalf("waitfile: %s has %d lines matching %q, want %d:\n%s", args[0], got, args[1], want, b)
}

func cliStop(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: stop NAME")
	}
	v, ok := cliBgs.Load(cliBgKey(ts, args[0]))
	if !ok {
		ts.Fatalf("stop: no bg program %q", args[0])
	}
	b := v.(*cliBg)
	b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		ts.Fatalf("stop: %s did not exit 30s after SIGINT", args[0])
	}
	out, _ := os.ReadFile(b.outPath)
	errOut, _ := os.ReadFile(b.errPath)
	io.Copy(ts.Stdout(), bytes.NewReader(out))
	io.Copy(ts.Stderr(), bytes.NewReader(errOut))
	if ok := b.cmd.ProcessState.Success(); ok == neg {
		ts.Fatalf("stop: %s exited with %v", args[0], b.cmd.ProcessState)
	}
}
