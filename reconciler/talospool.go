package reconciler

import "github.com/rezuscloud/rezuscloud/reconciler/talos"

// talosPool returns the pool that makes the reconciler's connections to
// machines' Talos API (log streams, bare-metal configs and resets): the
// Talos plane's, or for a reconciler without a plane one of its own, made
// at its first use and closed by Close.
func (r *Reconciler) talosPool() *talos.Pool {
	if pl := r.opts.Talos; pl != nil {
		return pl.Pool()
	}
	r.ownPoolOnce.Do(func() { r.ownPool = talos.NewPool(talos.PoolOptions{Now: r.opts.Now}) })
	return r.ownPool
}

// closeTalosPool closes the pool talosPool made, if it made one.
func (r *Reconciler) closeTalosPool() {
	r.ownPoolOnce.Do(func() {}) // none is made after Close
	if r.ownPool != nil {
		r.ownPool.Close()
	}
}
