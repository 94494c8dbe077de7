package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/store"
)

// Recover clears what a server process that died (SIGKILL, power loss)
// left in the data dir, so that nothing secret stays there and its
// tenants can run again. Call it once at startup, before Run. It runs
// startupSteps:
//
//   - RemoveUploadPreviews: the workspaces of upload previews go whole;
//   - RemoveLeftovers: the var files and plans of interrupted runs are
//     removed, in work directories and preview workspaces;
//   - ReleaseOwnLocks: the state locks that runs of the dead process still
//     hold (their holder is Options.LockHolder of the tenant) are
//     released, with a log line and an audit record.
//
// A tofu apply that the dead process started may still run, since it
// outlives the server to save what it created (see Runner.Apply). Its
// work directory and its lock are left alone until it ends: the tenant's
// next run waits for it (settle), and pushes what it saved
// (PushErroredState).
func (r *Reconciler) Recover() {
	if step, err := runSteps(context.Background(), r, startupSteps); err != nil {
		r.log.Error("recover at startup", "step", step, "err", err)
	}
}

// removeUploadPreviews removes the workspaces of upload previews, which
// live only while their request does.
func (r *Reconciler) removeUploadPreviews(context.Context) (stepResult, error) {
	uploads, _ := filepath.Glob(filepath.Join(r.opts.DataDir, "previews", "upload-*"))
	for _, dir := range uploads {
		if err := os.RemoveAll(dir); err != nil {
			r.log.Warn("remove preview workspace", "dir", dir, "err", err)
		}
	}
	return stepNext, nil
}

// removeLeftovers removes the var files and plans that interrupted runs
// left in work directories and preview workspaces where no tofu runs.
func (r *Reconciler) removeLeftovers(context.Context) (stepResult, error) {
	dirs, _ := filepath.Glob(filepath.Join(r.opts.DataDir, "work", "*"))
	refs, _ := filepath.Glob(filepath.Join(r.opts.DataDir, "previews", "ref-*", "*"))
	for _, dir := range append(dirs, refs...) {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || tofu.ApplyRunning(dir) {
			continue
		}
		if err := tofu.RemoveLeftovers(dir); err != nil {
			r.log.Warn("remove what an interrupted run left", "dir", dir, "err", err)
		}
	}
	return stepNext, nil
}

// releaseOwnLocks releases the state locks that runs of a dead server
// process hold, unless their tofu still runs. Among replicas
// (Options.Owners) it releases none: another replica's run may hold the
// lock, and the next run of the tenant on the replica that owns it
// releases a lock that a run of the tenant left (settle).
func (r *Reconciler) releaseOwnLocks(context.Context) (stepResult, error) {
	if r.opts.LockHolder == nil || r.opts.Owners != nil {
		return stepNext, nil
	}
	var locks []store.HeldLock
	if err := r.store.View(func(tx store.Tx) (err error) {
		locks, err = tx.Locks()
		return err
	}); err != nil {
		return stepNext, fmt.Errorf("list state locks: %w", err)
	}
	for _, l := range locks {
		if l.Token != r.opts.LockHolder(l.State) {
			continue
		}
		dir := filepath.Join(r.opts.DataDir, "work", l.State)
		if tofu.ApplyRunning(dir) {
			r.log.Warn("a tofu apply of an earlier server process still runs; its lock is released when it ends",
				"state", l.State, "lock", l.ID, "holder", l.Token, "dir", dir)
			continue
		}
		if err := r.releaseStaleLock(l.State); err != nil {
			r.log.Error("release state lock", "state", l.State, "err", err)
		}
	}
	return stepNext, nil
}

// settle readies a tenant's work directory for a run: it waits until no
// tofu that an earlier server process left running is still there, then
// releases the lock on the tenant's state that a run of the tenant still
// holds. The queue runs a tenant's runs one at a time and previews never
// lock, so at this point such a lock belongs to a run that is over.
func (r *Reconciler) settle(ctx context.Context, tenant, dir string) error {
	if tofu.ApplyRunning(dir) {
		r.log.Warn("waiting for a tofu apply of an earlier server process to finish", "tenant", tenant, "dir", dir)
	}
	if err := r.runner.WaitIdle(ctx, dir); err != nil {
		return err
	}
	return r.releaseStaleLock(tenant)
}

// releaseStaleLock releases the lock on the tenant's state when its holder
// is the reconciler's own run of the tenant.
func (r *Reconciler) releaseStaleLock(tenant string) error {
	if r.opts.LockHolder == nil {
		return nil
	}
	holder := r.opts.LockHolder(tenant)
	var released *store.HeldLock
	err := r.store.Update(func(tx store.Tx) error {
		locks, err := tx.Locks()
		if err != nil {
			return err
		}
		for _, l := range locks {
			if l.State != tenant || l.Token != holder {
				continue
			}
			ok, err := store.ReleaseLock(tx, l.State, l.ID, l.Token)
			if ok {
				released = &l
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release the lock a run of %s left: %w", tenant, err)
	}
	if released == nil {
		return nil
	}
	attrs := []any{"state", tenant, "lock", released.ID, "holder", released.Token,
		"operation", released.Holder().Operation, "locked_at", released.Created,
		"reason", "left by a run of the reconciler that ended without releasing it (the server or tofu died)"}
	r.log.Warn("released a state lock left by an earlier run", attrs...)
	if r.opts.Audit != nil {
		r.opts.Audit.Info("state lock released", attrs...)
	}
	return nil
}

// needsRecovery reports whether a tenant's last run was interrupted: a
// tofu apply of it may still run, it left errored.tfstate, or its lock is
// still held by the reconciler's run. Such a tenant runs tofu even when
// its manifests did not change.
func (r *Reconciler) needsRecovery(tenant string) bool {
	if r.runner.Interrupted(filepath.Join(r.opts.DataDir, "work", tenant)) {
		return true
	}
	if r.opts.LockHolder == nil {
		return false
	}
	held := false
	_ = r.store.View(func(tx store.Tx) error {
		locks, err := tx.Locks()
		for _, l := range locks {
			held = held || (l.State == tenant && l.Token == r.opts.LockHolder(tenant))
		}
		return err
	})
	return held
}

// placeholderVars returns the var file a destroy plan of the workspace in
// dir needs: an empty value for each variable. nil when dir holds no
// workspace.
func placeholderVars(dir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, render.MainFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return render.PlaceholderVarFile(b)
}
