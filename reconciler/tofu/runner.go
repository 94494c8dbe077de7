// Package tofu runs the tofu binary for the reconciler: one session of
// commands at a time per work directory (init when its inputs changed,
// an apply that plans and waits for the server's approval, show), with the credentials of the state
// backend in the environment only, secrets redacted from its output, and
// an apply that outlives a dying server to save its state (see
// applyDetached). It owns the files a run keeps in a work directory, it
// reads states as the state backend stores them (statefile.go), and it
// is the one reader of what tofu prints (output.go). It
// knows nothing of tenants, manifests or the store: the reconciler renders
// the workspace and calls it.
package tofu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/schema"
)

// DefaultInterruptDelay is how long an interrupted tofu has to save its
// state and release its lock before it is killed (Options.InterruptDelay).
const DefaultInterruptDelay = 10 * time.Minute

// Options configure how the server runs the tofu binary.
type Options struct {
	// Binary is the path of the tofu executable.
	Binary string
	// CLIConfigFile is the CLI configuration every run uses (provider
	// installation from the filesystem mirror).
	CLIConfigFile string
	// Env holds further variables every run gets, such as REZUSSIM_DIR or
	// TF_ENCRYPTION. They never appear in argv or on disk.
	Env map[string]string
	// Metrics, when set, records every tofu command.
	Metrics *metrics.Metrics
	// InterruptDelay is how long a cancelled run has, after SIGINT, to save
	// its state and release its lock. Default DefaultInterruptDelay.
	InterruptDelay time.Duration
	// Getenv reads PATH and HOME for tofu's environment; nil means
	// os.Getenv.
	Getenv func(string) string
	// MaxStateBytes bounds a state read from the state backend, as the
	// backend bounds the states it takes. Default DefaultMaxStateBytes.
	MaxStateBytes int64
	// InterruptOnDeath makes an apply get SIGINT when the server dies
	// (on Linux; elsewhere it runs on to its end): tofu then stops after
	// the operations in flight and saves its state at once, through a
	// state URL that reaches another replica, while the dead server's
	// lock on the state still holds. Without it an apply outlives the
	// server and saves errored.tfstate for the next start (see
	// applyDetached).
	InterruptOnDeath bool
	// Guard, with ActUntil, runs each apply under a guard process (see
	// Guard): the program and arguments that run it, such as the
	// server's binary and GuardCommand. The guard interrupts tofu once
	// ActUntil's deadline has passed without a later one, as when the
	// server is paused or dead. Without it an apply runs on to its end.
	Guard []string
	// ActUntil returns until when the server may act: a replica's lease,
	// renewed; the zero time when it may not. The guard is told every
	// new value.
	ActUntil func() time.Time
}

// Creds are the credentials a run uses to reach the server's own state
// backend. They travel to tofu in the environment only.
type Creds struct {
	Address  string // base URL of the state, e.g. http://127.0.0.1:8080/tfstate/production
	Username string
	Password string
	// Secrets are further values the run's output and errors never show,
	// such as those of the tenant's Talos secrets bundle. Secrets that
	// redact recognises by their form go without being named here.
	Secrets []string
}

// Runner drives tofu in per-tenant work directories and counts every
// process it starts, so that callers can prove a reconcile ran none.
type Runner struct {
	opts Options
	runs atomic.Int64
	mu   sync.Mutex
	dirs map[string]*workDir
}

// workDir serialises the runs in one work directory (tenants run in
// parallel) and keeps its tfexec handle from one run to the next: the
// handle learns tofu's version once, with a `tofu version` process of its
// own, and a new handle per run would start that process every time.
//
// The runner also remembers what it last saw of the markers an interrupted
// run leaves in the directory (see Runner.Interrupted). The fields after
// tf are guarded by Runner.mu.
type workDir struct {
	mu sync.Mutex
	tf *tfexec.Terraform

	using int    // sessions and waits open in the directory
	marks marks  // what the last look found, while nothing used the directory since
	uses  uint64 // counts the starts and ends of uses
}

// marks is what a runner knows of the markers of an interrupted run in a
// work directory.
type marks uint8

const (
	marksUnknown marks = iota // not looked at since the directory was last used
	marksNone
	marksFound
)

// NewRunner checks the options and returns a Runner.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Binary == "" {
		return nil, errors.New("tofu runner: no tofu binary configured")
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("tofu runner: %w", err)
	}
	if opts.InterruptDelay == 0 {
		opts.InterruptDelay = DefaultInterruptDelay
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.MaxStateBytes <= 0 {
		opts.MaxStateBytes = DefaultMaxStateBytes
	}
	return &Runner{opts: opts, dirs: map[string]*workDir{}}, nil
}

// Options returns the runner's options, defaults filled in.
func (r *Runner) Options() Options { return r.opts }

// Runs returns how many tofu processes the runner has started.
func (r *Runner) Runs() int64 { return r.runs.Load() }

// Result is what one apply or destroy produced.
type Result struct {
	Plan schema.PlanSummary
	// Changes are the resources the plan changed, as its output named
	// them.
	Changes []PlannedChange
	Output  string // the tail of tofu's output, with secrets redacted
	State   *tfjson.State
}

// Files a run keeps in its work directory only while it lasts.
const (
	// VarFile holds the values of the workspace's sensitive variables
	// while tofu plans; tofu reads them before it plans.
	VarFile = "rezuscloud.tfvars.json"
	// PlanFile is the plan that a rewrite of the state applies
	// (encrypted when state encryption is on).
	PlanFile = "rezuscloud.tfplan"
	// ErroredState is where tofu saves the state of an apply whose final
	// write to the backend failed.
	ErroredState = "errored.tfstate"
)

// session is one sequence of tofu commands in a work directory.
type session struct {
	r      *Runner
	tf     *tfexec.Terraform
	dir    string
	creds  Creds
	env    map[string]string
	out    *tailBuffer
	unlock func()
}

// workDir returns the runs' lock and tfexec handle of dir.
func (r *Runner) workDir(dir string) *workDir {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.dirs[dir]
	if !ok {
		w = &workDir{}
		r.dirs[dir] = w
	}
	return w
}

// open starts a session in dir once no other run uses it: none of this
// runner, and no tofu that an earlier server process left running there.
// What an interrupted run left behind (its var file and plan) goes first.
func (r *Runner) open(ctx context.Context, dir string, creds Creds) (*session, error) {
	w := r.workDir(dir)
	w.mu.Lock()
	done := r.use(w)
	unlock := func() {
		done()
		w.mu.Unlock()
	}
	if err := waitIdle(ctx, dir); err != nil {
		unlock()
		return nil, fmt.Errorf("tofu in %s: %w", dir, err)
	}
	if err := RemoveLeftovers(dir); err != nil {
		unlock()
		return nil, fmt.Errorf("tofu in %s: %w", dir, err)
	}
	if w.tf == nil {
		tf, err := tfexec.NewTerraform(dir, r.opts.Binary)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("tofu in %s: %w", dir, err)
		}
		w.tf = tf
	}
	tf := w.tf
	env := map[string]string{
		"PATH":                   r.opts.Getenv("PATH"),
		"HOME":                   r.opts.Getenv("HOME"),
		"TF_CLI_CONFIG_FILE":     r.opts.CLIConfigFile,
		"CHECKPOINT_DISABLE":     "1",
		"TF_HTTP_ADDRESS":        creds.Address,
		"TF_HTTP_LOCK_ADDRESS":   creds.Address,
		"TF_HTTP_UNLOCK_ADDRESS": creds.Address,
		"TF_HTTP_USERNAME":       creds.Username,
		"TF_HTTP_PASSWORD":       creds.Password,
	}
	for k, v := range r.opts.Env {
		env[k] = v
	}
	if err := tf.SetEnv(env); err != nil {
		unlock()
		return nil, fmt.Errorf("tofu environment: %w", err)
	}
	if err := tf.SetWaitDelay(r.opts.InterruptDelay); err != nil {
		unlock()
		return nil, err
	}
	secrets := append([]string{creds.Password}, creds.Secrets...)
	for k, v := range r.opts.Env {
		if k == "TF_ENCRYPTION" || strings.Contains(k, "PASSWORD") || strings.Contains(k, "TOKEN") {
			secrets = append(secrets, v)
		}
	}
	out := newTailBuffer(16<<10, redact.New(secrets...))
	tf.SetStdout(out)
	tf.SetStderr(out)
	return &session{r: r, tf: tf, dir: dir, creds: creds, env: env, out: out, unlock: unlock}, nil
}

// use marks the start of a session or wait in w, which may make or remove
// the markers of an interrupted run, and returns the func that marks its
// end: what the runner knew of the markers is forgotten at both.
func (r *Runner) use(w *workDir) (done func()) {
	mark := func(n int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		w.using += n
		w.marks = marksUnknown
		w.uses++
	}
	mark(1)
	return func() { mark(-1) }
}

// Interrupted reports whether the last apply in dir did not end as it
// should (see the func Interrupted). It looks at the directory once, and
// again only after a run of this runner used it: while the runner lives,
// only its own runs make or remove the markers, and a tofu that an earlier
// server process left running holds its output file, which the first look
// finds.
func (r *Runner) Interrupted(dir string) bool {
	w := r.workDir(dir)
	r.mu.Lock()
	known, uses, using := w.marks, w.uses, w.using
	r.mu.Unlock()
	if known != marksUnknown {
		return known == marksFound
	}
	found := Interrupted(dir)
	r.mu.Lock()
	defer r.mu.Unlock()
	if using == 0 && w.uses == uses {
		w.marks = marksNone
		if found {
			w.marks = marksFound
		}
	}
	return found
}

// WaitIdle waits until no tofu runs in dir: neither one of this runner nor
// one that an earlier server process started and left running when it
// died. It returns at once when none runs.
func (r *Runner) WaitIdle(ctx context.Context, dir string) error {
	w := r.workDir(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	defer r.use(w)()
	return waitIdle(ctx, dir)
}

// RemoveLeftovers removes the var file and plan of a run that was
// interrupted before it could remove them itself.
func RemoveLeftovers(dir string) error {
	for _, name := range []string{VarFile, PlanFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// withVars writes vars to the work directory's var file (0600) and returns
// its path and a func that removes it. With no vars it writes nothing.
func (s *session) withVars(vars []byte) (path string, remove func(), err error) {
	if vars == nil {
		return "", func() {}, nil
	}
	path = filepath.Join(s.dir, VarFile)
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("write var file: %w", err)
	}
	remove = func() { _ = os.Remove(path) }
	_, err = f.Write(vars)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("write var file: %w", err)
	}
	return path, remove, nil
}

func (s *session) close() { s.unlock() }

// state returns the client of the session's state in the state backend.
func (s *session) state() StateClient {
	return StateClient{Creds: s.creds, MaxBytes: s.r.opts.MaxStateBytes}
}

// cmd runs one tofu command, counting and timing it. The JSON that show
// prints holds every value of the state or plan, secrets included: it
// never reaches the output tail.
func (s *session) cmd(name string, fn func() error) error {
	s.r.runs.Add(1)
	if name == "show" {
		s.tf.SetStdout(io.Discard)
		defer s.tf.SetStdout(s.out)
	}
	start := time.Now()
	err := fn()
	s.r.opts.Metrics.Tofu(name, time.Since(start).Seconds(), err)
	return err
}

// InitMarker names the file in a work directory that records the inputs of
// the last successful init.
const InitMarker = ".rezuscloud-init"

// init runs `tofu init` when its inputs changed since the last successful
// init of this directory: the required providers and backend of the
// configuration, the CLI configuration and the tofu binary.
func (s *session) init(ctx context.Context, initInputs []byte) error {
	h := sha256.New()
	h.Write(initInputs)
	fmt.Fprintf(h, "\x00%s\x00%s", s.r.opts.Binary, s.r.opts.CLIConfigFile)
	if b, err := os.ReadFile(s.r.opts.CLIConfigFile); err == nil {
		h.Write(b)
	}
	want := hex.EncodeToString(h.Sum(nil))
	marker := filepath.Join(s.dir, InitMarker)
	dotTerraform := filepath.Join(s.dir, ".terraform")
	if got, err := os.ReadFile(marker); err == nil && string(got) == want {
		if _, err := os.Stat(dotTerraform); err == nil {
			return nil
		}
	}
	// A preview borrows its tenant's .terraform through a symlink while
	// their inputs agree; init must never write through it.
	if fi, err := os.Lstat(dotTerraform); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(dotTerraform); err != nil {
			return err
		}
	}
	if err := s.cmd("init", func() error { return s.tf.Init(ctx, tfexec.Upgrade(false), tfexec.Reconfigure(true)) }); err != nil {
		return fmt.Errorf("tofu init: %w", s.redact(err))
	}
	return os.WriteFile(marker, []byte(want), 0o600)
}

// redact strips known secrets from an error's text and condenses it to
// one line; the run's output keeps the whole of it.
func (s *session) redact(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(oneLine(s.out.redact(err.Error())))
}

// planApply plans and applies what the plan changes, in one tofu process
// (applyApproving). A check, when set, sees the resources the plan
// destroys or replaces before anything is applied; an error from it stops
// the run there.
//
// With force it applies a plan without changes too, which rewrites the
// state: that is how state written before encryption was turned on gets
// encrypted. That takes a plan file and a second process (rewrite); only
// Rewrite forces, and it neither destroys nor checks. It returns the
// plan's summary and the resources it changes.
//
// A destroy leaves the resources named in keep in the state.
func (s *session) planApply(ctx context.Context, vars []byte, destroy bool, keep []string, force bool, check Check) (schema.PlanSummary, []PlannedChange, error) {
	if force {
		return s.rewrite(ctx, vars)
	}
	return s.applyApproving(ctx, vars, destroy, keep, check)
}

// applyApproving runs `tofu apply` without -auto-approve, so that tofu
// plans, prints the plan and waits on its stdin for approval. The server
// reads the plan from tofu's output as tofu writes it; once tofu waits, it
// removes the var file (tofu read the variables before it planned), runs
// the check on the resources the plan destroys or replaces, and answers
// "yes" or "no". One process saves a second start of tofu and its
// providers, and tofu applies exactly the plan the check saw. tofu runs
// detached (see applyDetached), so an approved apply outlives the server;
// a server that dies before it answers leaves tofu an EOF, which tofu
// takes as no. A plan without changes asks nothing; tofu then writes the
// refreshed state, as a bare `tofu apply` does, and the serial moves.
func (s *session) applyApproving(ctx context.Context, vars []byte, destroy bool, keep []string, check Check) (schema.PlanSummary, []PlannedChange, error) {
	varPath, removeVars, err := s.withVars(vars)
	if err != nil {
		return schema.PlanSummary{}, nil, err
	}
	defer removeVars()
	args := []string{"apply", "-no-color", "-input=true", "-lock=true", "-lock-timeout=0s"}
	if destroy {
		args = append(args, "-destroy")
		for _, addr := range keep {
			args = append(args, "-exclude="+addr)
		}
	}
	if varPath != "" {
		args = append(args, "-var-file="+varPath)
	}
	line := &planLine{}
	var sum schema.PlanSummary
	var refused error
	approved := false
	err = s.cmd("apply", func() error {
		return s.detached(ctx, args, func(stdin io.WriteCloser, out *os.File, exited <-chan struct{}) error {
			waiting, err := awaitApproval(ctx, out, line, exited)
			if err != nil || !waiting {
				return err
			}
			removeVars()
			sum, _ = line.summary()
			answer := "yes\n"
			if check != nil {
				if refused = check(line.goneResources()); refused != nil {
					answer = "no\n"
				}
			}
			_, err = io.WriteString(stdin, answer)
			approved = err == nil && refused == nil
			return err
		})
	})
	changes := line.planned()
	switch {
	case refused != nil:
		return sum, changes, refused
	case err != nil && !approved:
		// Nothing was applied: tofu failed while it planned.
		return sum, changes, fmt.Errorf("tofu plan: %w", s.redact(err))
	case err != nil:
		return sum, changes, fmt.Errorf("tofu apply: %w", s.redact(err))
	}
	return sum, changes, nil
}

// rewrite plans into a plan file and applies exactly that plan, changes
// or not, so that tofu writes the state again. The variables exist on disk
// only while tofu plans: the plan carries them to apply.
func (s *session) rewrite(ctx context.Context, vars []byte) (schema.PlanSummary, []PlannedChange, error) {
	planPath := filepath.Join(s.dir, PlanFile)
	defer os.Remove(planPath)
	varPath, removeVars, err := s.withVars(vars)
	if err != nil {
		return schema.PlanSummary{}, nil, err
	}
	opts := []tfexec.PlanOption{tfexec.Out(planPath)}
	if varPath != "" {
		opts = append(opts, tfexec.VarFile(varPath))
	}
	var changed bool
	// The summary comes from the plan's own output when tofu prints it;
	// `tofu show` of the plan file only when it does not.
	line := &planLine{}
	s.tf.SetStdout(io.MultiWriter(s.out, line))
	err = s.cmd("plan", func() (err error) {
		changed, err = s.tf.Plan(ctx, opts...)
		return err
	})
	removeVars()
	s.tf.SetStdout(s.out)
	if err != nil {
		return schema.PlanSummary{}, nil, fmt.Errorf("tofu plan: %w", s.redact(err))
	}
	sum, ok := line.summary()
	changes := line.planned()
	if !ok && changed {
		var plan *tfjson.Plan
		err = s.cmd("show", func() (err error) {
			plan, err = s.tf.ShowPlanFile(ctx, planPath)
			return err
		})
		if err != nil {
			return schema.PlanSummary{}, nil, fmt.Errorf("tofu show plan: %w", s.redact(err))
		}
		sum, changes = summarize(plan)
	}
	if err := s.cmd("apply", func() error { return s.applyDetached(ctx, planPath) }); err != nil {
		return sum, changes, fmt.Errorf("tofu apply: %w", s.redact(err))
	}
	return sum, changes, nil
}

// show returns the work directory's current state: read from the state
// backend when it is a plain state file, else (encrypted) from `tofu show`.
func (s *session) show(ctx context.Context) (*tfjson.State, error) {
	if raw, err := s.state().Get(ctx); err == nil {
		if st, ok := stateFromFile(raw); ok {
			return st, nil
		}
	}
	var st *tfjson.State
	err := s.cmd("show", func() (err error) {
		st, err = s.tf.Show(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tofu show: %w", s.redact(err))
	}
	return st, nil
}

// Apply brings the work directory's configuration into effect: init when
// needed, plan with vars (the .tfvars.json of the sensitive variables, on disk
// only while tofu plans), apply that plan when it changes anything, and
// show the resulting state for projection.
func (r *Runner) Apply(ctx context.Context, dir string, initInputs, vars []byte, creds Creds) (*Result, error) {
	return r.run(ctx, dir, initInputs, vars, creds, false, nil, false, nil)
}

// Check judges the resources a plan destroys or replaces (each with the
// actions "delete", or "delete" and "create") before the plan is applied.
type Check func(gone []PlannedChange) error

// ApplyChecked is Apply with a check between plan and apply: when the
// check fails, nothing is applied and its error is returned.
func (r *Runner) ApplyChecked(ctx context.Context, dir string, initInputs, vars []byte, creds Creds, check Check) (*Result, error) {
	return r.run(ctx, dir, initInputs, vars, creds, false, nil, false, check)
}

// Rewrite is Apply that also applies a plan without changes, so that tofu
// writes the state again (encrypting it, once encryption is configured).
func (r *Runner) Rewrite(ctx context.Context, dir string, initInputs, vars []byte, creds Creds) (*Result, error) {
	return r.run(ctx, dir, initInputs, vars, creds, false, nil, true, nil)
}

// Destroy removes everything the work directory's state holds but the
// resources named in keep (tofu's -exclude), which stay in the state and
// are neither destroyed nor shown in the plan.
func (r *Runner) Destroy(ctx context.Context, dir string, initInputs, vars []byte, creds Creds, keep ...string) (*Result, error) {
	return r.run(ctx, dir, initInputs, vars, creds, true, keep, false, nil)
}

func (r *Runner) run(ctx context.Context, dir string, initInputs, vars []byte, creds Creds, destroy bool, keep []string, force bool, check Check) (*Result, error) {
	s, err := r.open(ctx, dir, creds)
	if err != nil {
		return nil, err
	}
	defer s.close()
	res := &Result{}
	defer func() { res.Output = s.out.String() }()
	if err := s.init(ctx, initInputs); err != nil {
		return res, err
	}
	if res.Plan, res.Changes, err = s.planApply(ctx, vars, destroy, keep, force, check); err != nil {
		return res, err
	}
	if res.State, err = s.show(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// PushErrored pushes the state that an interrupted apply saved in the
// work directory's errored.tfstate back to the state backend, and removes
// the file (see pushErrored); note says what it did, for the run's
// output. Without the file it does nothing. Run it before Apply or
// Destroy, which would otherwise plan against a state that lacks what the
// interrupted apply created.
func (r *Runner) PushErrored(ctx context.Context, dir string, creds Creds) (note string, err error) {
	if _, err := os.Stat(filepath.Join(dir, ErroredState)); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	s, err := r.open(ctx, dir, creds)
	if err != nil {
		return "", err
	}
	defer s.close()
	err = s.pushErrored(ctx)
	return s.out.String(), err
}

// PlanResult is a plan that was only planned.
type PlanResult struct {
	Plan      schema.PlanSummary
	Resources []PlannedChange
	Output    string
}

// PlannedChange is one resource of a plan.
type PlannedChange struct {
	Address string
	Actions []string
}

// Plan plans the work directory's configuration against the current state
// without taking the state lock (-lock=false), and never applies: previews
// use it, so it must never delay or disturb an apply. vars are handled as
// Apply handles them.
func (r *Runner) Plan(ctx context.Context, dir string, initInputs, vars []byte, creds Creds, destroy bool) (*PlanResult, error) {
	s, err := r.open(ctx, dir, creds)
	if err != nil {
		return nil, err
	}
	defer s.close()
	res := &PlanResult{}
	defer func() { res.Output = s.out.String() }()
	if err := s.init(ctx, initInputs); err != nil {
		return res, err
	}
	// The machine-readable plan output names every planned change and the
	// summary, so no `tofu show` of a plan file is needed; no plan file is
	// written at all, since nothing applies it.
	varPath, removeVars, err := s.withVars(vars)
	if err != nil {
		return res, err
	}
	defer removeVars()
	opts := []tfexec.PlanOption{tfexec.Destroy(destroy), tfexec.Lock(false)}
	if varPath != "" {
		opts = append(opts, tfexec.VarFile(varPath))
	}
	var stream planJSON
	var changed bool
	err = s.cmd("plan", func() (err error) {
		changed, err = s.tf.PlanJSON(ctx, &stream, opts...)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("tofu plan: %w", s.redact(err))
	}
	if !changed {
		return res, nil
	}
	res.Plan, res.Resources = stream.result()
	return res, nil
}

// State returns the current state of a work directory without changing it.
func (r *Runner) State(ctx context.Context, dir string, initInputs []byte, creds Creds) (*tfjson.State, error) {
	s, err := r.open(ctx, dir, creds)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.init(ctx, initInputs); err != nil {
		return nil, err
	}
	return s.show(ctx)
}

// tailBuffer keeps the last max bytes written to it and redacts secrets
// when read.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	secrets *redact.Redactor
}

func newTailBuffer(max int, secrets *redact.Redactor) *tailBuffer {
	return &tailBuffer{max: max, secrets: secrets}
}

var _ io.Writer = (*tailBuffer)(nil)

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 2*t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String returns the last max bytes, starting at a line boundary, redacted.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	s := string(b)
	t.mu.Unlock()
	return t.redact(s)
}

// redact removes the run's secrets from s: those it knows and those
// package redact recognises.
func (t *tailBuffer) redact(s string) string { return t.secrets.String(s) }
