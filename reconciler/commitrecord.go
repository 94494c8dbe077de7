package reconciler

import (
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

func (r *Reconciler) putCommit(c *schema.Commit, also func(store.Tx) error) {
	status.Commit(&c.Status, r.opts.Now())
	err := r.store.Update(func(tx store.Tx) error {
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		_, err := tx.PutObject(schema.KindCommit, c.Metadata.Name, c)
		return err
	})
	if err != nil {
		r.log.Error("record commit", "revision", c.Spec.SHA, "err", err)
		return
	}
	if r.opts.OnCommit != nil {
		cp := *c
		cp.Status.Tenants = append([]schema.TenantResult(nil), c.Status.Tenants...)
		cp.Status.Problems = append([]schema.Problem(nil), c.Status.Problems...)
		cp.Status.Conditions = append(schema.Conditions(nil), c.Status.Conditions...)
		r.opts.OnCommit(&cp)
	}
}

// finishedCommit returns the stored Commit of name when it has finished,
// else nil.
func (r *Reconciler) finishedCommit(name string) *schema.Commit {
	var c *schema.Commit
	_ = r.store.View(func(tx store.Tx) error {
		v, err := getJSON[schema.Commit](tx, schema.KindCommit, name)
		if err == nil && v.Status.Phase.Done() {
			c = v
		}
		return nil
	})
	return c
}
