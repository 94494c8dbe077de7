package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// Preview shows what a tree of manifests would do, without applying
// anything: it validates the tree as a commit, diffs every tenant against
// what was applied, and, when asked, renders the workspaces and plans them
// with `tofu plan -lock=false` in throwaway directories against each
// tenant's current state. POST /api/v1/previews calls it.
func (r *Reconciler) Preview(ctx context.Context, req preview.Request) (*preview.Result, error) {
	fsys := fstest.MapFS{}
	total := 0
	for name, body := range req.Files {
		clean := path.Clean(name)
		if !validUploadPath(clean) {
			return nil, fmt.Errorf("preview: file name %q is not a relative path inside the tree", name)
		}
		total += len(body)
		fsys[clean] = &fstest.MapFile{Data: []byte(body), Mode: 0o644}
	}
	if total > preview.MaxUploadBytes {
		return nil, fmt.Errorf("preview: %d bytes of manifests, more than the %d a preview takes", total, preview.MaxUploadBytes)
	}
	root := req.Root
	if root == "" {
		root = "."
	}
	key := "upload-" + store.NewUID()
	defer os.RemoveAll(r.previewDir(key))
	return r.preview(ctx, sources.Snapshot{FS: fsys, Root: root}, key, req.Plan, req.Rendered)
}

func validUploadPath(name string) bool {
	return name != "." && !strings.HasPrefix(name, "../") && name != ".." && !strings.HasPrefix(name, "/")
}

// previewDir is where the throwaway workspaces of one preview live.
func (r *Reconciler) previewDir(key string) string {
	return filepath.Join(r.opts.DataDir, "previews", key)
}

// refKey names a preview ref's directory.
func refKey(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return "ref-" + hex.EncodeToString(sum[:8])
}

func (r *Reconciler) preview(ctx context.Context, snap sources.Snapshot, key string, plan, rendered bool) (*preview.Result, error) {
	applied, err := r.appliedRecords()
	if err != nil {
		return nil, err
	}
	desired, hashes, probs := r.load(snap, applied)
	if len(probs) > 0 {
		return &preview.Result{Valid: false, Problems: probs, Tenants: []preview.Tenant{}}, nil
	}
	res := &preview.Result{Valid: true, Tenants: []preview.Tenant{}}
	seen := map[string]bool{}
	for _, td := range desired.Tenants {
		name := td.Tenant.Metadata.Name
		seen[name] = true
		prev := applied[name]
		before := modeldiff.Model{}
		if prev != nil {
			before = prev.Model
		}
		t := preview.Tenant{Tenant: name, Changes: modeldiff.Diff(before, modeldiff.DesiredModel(td.Redacted()))}
		if len(t.Changes) == 0 && prev != nil && prev.InputHash == hashes[name] {
			res.Tenants = append(res.Tenants, t)
			continue
		}
		if plan || rendered {
			r.previewTenant(ctx, &t, td, prev, key, plan, rendered)
		}
		res.Tenants = append(res.Tenants, t)
	}
	for name, prev := range applied {
		if seen[name] {
			continue
		}
		t := preview.Tenant{Tenant: name, Changes: modeldiff.Diff(prev.Model, modeldiff.Model{})}
		if rendered {
			if b, err := r.appliedWorkspace(name); err == nil {
				t.Rendered = &preview.Rendered{Applied: string(b)}
			}
		}
		if plan {
			r.previewDestroy(ctx, &t, prev, key)
		}
		res.Tenants = append(res.Tenants, t)
	}
	sortTenants(res.Tenants)
	return res, nil
}

func sortTenants(ts []preview.Tenant) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Tenant < ts[j].Tenant })
}

// appliedWorkspace returns the tenant's applied main.tf.json, redacted.
func (r *Reconciler) appliedWorkspace(tenant string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(r.opts.DataDir, "work", tenant, render.MainFile))
	if err != nil {
		return nil, err
	}
	return render.Redact(b)
}

// previewTenant renders a tenant as declared and, when asked, plans it in a
// throwaway directory. Its errors never quote a decrypted value.
func (r *Reconciler) previewTenant(ctx context.Context, t *preview.Tenant, td *schema.TenantDesired, prev *appliedRecord, key string, plan, rendered bool) {
	defer func(scrub func(string) string) { t.Error = scrub(t.Error) }(scrubber(td))
	name := td.Tenant.Metadata.Name
	work, err := r.workDir(name)
	if err != nil {
		t.Error = err.Error()
		return
	}
	creds, revoke := r.creds(name)
	defer revoke()
	var initInputs []byte
	if prev != nil {
		initInputs = prev.InitInputs
	}
	bundle, _, err := r.secretsFor(ctx, td, work, initInputs, creds)
	if err != nil {
		t.Error = err.Error()
		return
	}
	creds.Secrets = talos.SecretValues(bundle)
	ws, err := r.modules.Render(td, bundle)
	if err != nil {
		t.Error = err.Error()
		return
	}
	if rendered {
		t.Rendered = &preview.Rendered{}
		if b, err := r.appliedWorkspace(name); err == nil {
			t.Rendered.Applied = string(b)
		}
		if b, err := render.Redact(ws.Files[render.MainFile]); err == nil {
			t.Rendered.Proposed = string(b)
		}
	}
	if !plan {
		return
	}
	dir, err := r.throwaway(key, name)
	if err != nil {
		t.Error = err.Error()
		return
	}
	for fname, b := range ws.Files {
		if err := writeFileAtomic(filepath.Join(dir, fname), b); err != nil {
			t.Error = err.Error()
			return
		}
	}
	vars, err := ws.VarFile()
	if err != nil {
		t.Error = err.Error()
		return
	}
	out, err := r.runner.Plan(ctx, dir, ws.InitInputs, vars, creds, false)
	r.planned(t, out, err)
}

// previewDestroy plans the destruction of a tenant that left the tree.
func (r *Reconciler) previewDestroy(ctx context.Context, t *preview.Tenant, prev *appliedRecord, key string) {
	b, err := os.ReadFile(filepath.Join(r.opts.DataDir, "work", prev.Tenant, render.MainFile))
	if err != nil {
		t.Error = fmt.Sprintf("no applied workspace to plan its destruction: %v", err)
		return
	}
	dir, err := r.throwaway(key, prev.Tenant)
	if err != nil {
		t.Error = err.Error()
		return
	}
	if err := writeFileAtomic(filepath.Join(dir, render.MainFile), b); err != nil {
		t.Error = err.Error()
		return
	}
	vars, err := placeholderVars(dir)
	if err != nil {
		t.Error = err.Error()
		return
	}
	creds, revoke := r.creds(prev.Tenant)
	defer revoke()
	out, err := r.runner.Plan(ctx, dir, prev.InitInputs, vars, creds, true)
	r.planned(t, out, err)
}

func (r *Reconciler) planned(t *preview.Tenant, out *tofu.PlanResult, err error) {
	if err != nil {
		t.Error = redact.Text(err.Error())
		return
	}
	plan := r.withMachines(out.Plan, out.Resources)
	t.Plan = &plan
	for _, rc := range out.Resources {
		t.Resources = append(t.Resources, preview.ResourceChange{Address: rc.Address, Actions: rc.Actions})
	}
}

// throwaway makes a preview's directory for one tenant, with the tenant's
// provider lock file so that it plans with the providers it applies with.
// The directory is the preview's own; only .terraform is borrowed.
func (r *Reconciler) throwaway(key, tenant string) (string, error) {
	dir := filepath.Join(r.previewDir(key), tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	work := filepath.Join(r.opts.DataDir, "work", tenant)
	for _, name := range []string{".terraform.lock.hcl", tofu.InitMarker} {
		if b, err := os.ReadFile(filepath.Join(work, name)); err == nil {
			if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
				return "", err
			}
		}
	}
	// Borrow the tenant's initialised providers and backend settings, so
	// that a preview plans without a `tofu init` of its own; init replaces
	// the link with a directory of its own if the inputs differ.
	if _, err := os.Lstat(filepath.Join(dir, ".terraform")); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(work, ".terraform")); err == nil {
			if err := os.Symlink(filepath.Join(work, ".terraform"), filepath.Join(dir, ".terraform")); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// SubmitPreview queues a plan preview of a preview ref's new head, on the
// preview queue, which never holds up applies. Its result is a Commit
// named "preview-SHA" with spec.preview set, reported like any other.
func (r *Reconciler) SubmitPreview(snap sources.Snapshot) {
	r.previews.Enqueue(snap.Ref, &previewJob{r: r, snap: snap})
}

// ForgetPreview removes the workspaces of a preview ref that was deleted.
func (r *Reconciler) ForgetPreview(ref string) {
	r.previews.Enqueue(ref, &forgetJob{dir: r.previewDir(refKey(ref))})
}

type forgetJob struct{ dir string }

func (j *forgetJob) Run(context.Context) { _ = os.RemoveAll(j.dir) }
func (j *forgetJob) Superseded(Job)      {}

type previewJob struct {
	r    *Reconciler
	snap sources.Snapshot
}

func (j *previewJob) Superseded(Job) {}

func (j *previewJob) Run(ctx context.Context) {
	r, snap := j.r, j.snap
	c := &schema.Commit{
		APIVersion: schema.APIVersion, Kind: schema.KindCommit,
		Metadata: schema.ObjectMeta{Name: schema.PreviewCommitName(snap.Revision), Labels: map[string]string{schema.LabelPreview: "true"}},
		Spec: schema.CommitSpec{SHA: snap.Revision, Ref: snap.Ref, Author: snap.Author, Message: snap.Message,
			MessageTruncated: snap.MessageTruncated, Preview: true}.Bounded(),
	}
	c.Status.Timings.ReceivedAt = r.opts.Now()
	c.Status.Phase = schema.CommitPlanning
	r.putCommit(c, nil)
	c.Status.Signature = commitSignature(snap.Signature)
	res, err := r.preview(ctx, snap, refKey(snap.Ref), true, false)
	c.Status.Timings.FinishedAt = r.opts.Now()
	switch {
	case err != nil:
		c.Status.Phase, c.Status.Message = schema.CommitFailed, err.Error()
	case !res.Valid:
		c.Status.Phase = schema.CommitInvalid
		c.Status.Problems = res.Problems
		c.Status.Message = fmt.Sprintf("%d problems: this ref would not apply", len(res.Problems))
	default:
		failed := 0
		for _, t := range res.Tenants {
			tr := schema.TenantResult{Tenant: t.Tenant, Phase: schema.CommitSucceeded, Error: t.Error}
			if t.Plan != nil {
				tr.Plan = *t.Plan
			}
			if t.Error != "" {
				tr.Phase = schema.CommitFailed
				failed++
			}
			c.Status.Tenants = append(c.Status.Tenants, tr)
		}
		switch {
		case failed == 0:
			c.Status.Phase = schema.CommitSucceeded
		case failed == len(res.Tenants):
			c.Status.Phase = schema.CommitFailed
		default:
			c.Status.Phase = schema.CommitPartiallyFailed
		}
	}
	noteUnverified(c)
	r.putCommit(c, nil)
}

// RenderedWorkspace implements backend.Previewer.
func (r *Reconciler) RenderedWorkspace(_ context.Context, tenant string) ([]byte, error) {
	b, err := r.appliedWorkspace(tenant)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tenant %s has no applied workspace: %w", tenant, store.ErrNotFound)
	}
	return b, err
}
