package talos

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/store"
)

// Store kinds of the plane's internal records, keyed by tenant. The API
// does not serve them.
const (
	// KindBootstrap records that a tenant's etcd was bootstrapped, or is
	// being bootstrapped on one named machine.
	KindBootstrap = "TalosBootstrap"
	// KindRollout records a tenant's rollout: the machine being worked on,
	// the restarts handled, a failure that stopped it, and the config
	// hashes its node groups should run.
	KindRollout = "TalosRollout"
	// KindRestore records a tenant's restore of an etcd snapshot: the
	// backup restored and the phase it is in (Plane.Restore).
	KindRestore = "TalosRestore"
)

// DefaultInstaller is the installer image repository whose tag names the
// Talos version an Upgrade installs: ghcr.io/siderolabs/installer:v1.12.6.
const DefaultInstaller = "ghcr.io/siderolabs/installer"

// Options configure a Plane. Store and Pool are required.
type Options struct {
	Store store.Store
	Pool  *Pool
	// Prober, when set, receives the plane's own fresh observations, so
	// that status shows what rollouts see; nil makes a private one.
	Prober *Prober
	// Installer is the image repository of Talos installers (registry and
	// image, no tag). Default DefaultInstaller.
	Installer string
	// Timeout is how long a machine may take to be back and ready after
	// an operation (a config apply, an upgrade, a reboot) before it counts
	// as failed: an upgraded machine is then rolled back. Default 10 min.
	Timeout time.Duration
	// Wait is how long a call waits for a machine or etcd to become ready
	// before it gives up with a WaitingError. Default 5 min.
	Wait time.Duration
	// Poll is how often a machine being worked on is asked how it is.
	// Default 200 ms.
	Poll time.Duration
	// CallTimeout bounds every single API call. Default 10 s.
	CallTimeout time.Duration
	// SnapshotIdle is how long an etcd snapshot stream may go without a
	// byte before it is cut off (Plane.Snapshot). Default 30 s.
	SnapshotIdle time.Duration
	// Gate, when set, is asked right before every call that disrupts a
	// machine or its cluster (a config apply, an upgrade, a reboot, an
	// etcd bootstrap, a reset): an error stops the call. A replica's gate
	// fails once its lease may have ended, so that a replica that was
	// paused past its lease makes no such call when it runs again.
	Gate func() error
	// OnProgress, when set, is called with every change of a rollout's
	// progress. It must not block for long.
	OnProgress func(status.Rollout)
	Logger     *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Plane bootstraps tenants and rolls changes through their machines.
// Calls for one tenant must not run concurrently (the reconciler runs a
// tenant's steps one at a time); calls for different tenants may.
type Plane struct {
	opts   Options
	store  store.Store
	pool   *Pool
	prober *Prober
	log    *slog.Logger

	scrubs sync.Map // tenant → its Desired.Scrub, as the last Roll gave it

	progressMu   sync.Mutex
	lastProgress map[string]status.Rollout // by tenant, as last reported
	kick         chan struct{}             // a progress changed: observe now

	machines *machineList     // what the observer's passes read of the Machines
	verified verifiedStatuses // the machines whose stored status a pass found as observed
	kube     *kubeWatch       // what the observer knows of the tenants' Kubernetes APIs
	watches  *watchSet        // the machines' watches, while the observer watches
	watching atomic.Bool      // the observer runs with Watch: a changed Machine wakes it
	tenants  tenantsWritten   // what the observer last recorded of the tenants
	// polled are the machines that the observer's last pass found
	// followed by neither a watch nor an events stream, for the sampler.
	polled atomic.Pointer[[]sampleTarget]
}

// New returns a plane.
func New(opts Options) (*Plane, error) {
	if opts.Store == nil || opts.Pool == nil {
		return nil, errors.New("talos plane: Store and Pool are required")
	}
	if opts.Installer == "" {
		opts.Installer = DefaultInstaller
	}
	if strings.Contains(opts.Installer[strings.LastIndex(opts.Installer, "/")+1:], ":") {
		return nil, fmt.Errorf("talos plane: installer %q: give the image without a tag; the tag is the Talos version", opts.Installer)
	}
	defaults := []struct {
		v   *time.Duration
		def time.Duration
	}{{&opts.Timeout, 10 * time.Minute}, {&opts.Wait, 5 * time.Minute}, {&opts.Poll, 200 * time.Millisecond}, {&opts.CallTimeout, 10 * time.Second}, {&opts.SnapshotIdle, 30 * time.Second}}
	for _, d := range defaults {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Prober == nil {
		opts.Prober = NewProber(opts.Pool, ProberOptions{Now: opts.Now, Timeout: opts.CallTimeout, Log: opts.Logger})
	}
	pl := &Plane{opts: opts, store: opts.Store, pool: opts.Pool, prober: opts.Prober, log: opts.Logger,
		lastProgress: map[string]status.Rollout{}, kick: make(chan struct{}, 1), machines: &machineList{stale: true}, kube: newKubeWatch()}
	pl.watches = newWatchSet(pl)
	kept := pl.watches.kept
	pl.prober.gateway.Store(&kept)
	opts.Store.OnCommit(pl.tenants.follow)
	opts.Store.OnCommit(func(changes []store.Change) {
		// A new Machine is watched at once, and a rollout's progress,
		// which another replica's plane may have saved, is written at once.
		if (pl.machines.follow(changes) || rolloutSaved(changes)) && pl.watching.Load() {
			pl.Wake()
		}
	})
	return pl, nil
}

// rolloutSaved reports whether changes hold a write of a rollout record.
func rolloutSaved(changes []store.Change) bool {
	for _, c := range changes {
		if c.Resource.Kind == KindRollout {
			return true
		}
	}
	return false
}

// Pool returns the plane's client pool, which makes every connection to
// the tenants' machines.
func (pl *Plane) Pool() *Pool { return pl.pool }

// InstallerImage returns the installer image of a Talos version
// ("1.12.6" or "v1.12.6").
func (pl *Plane) InstallerImage(version string) string {
	return pl.opts.Installer + ":" + vTag(version)
}

func vTag(version string) string { return "v" + strings.TrimPrefix(version, "v") }

// load reads a record; found is false when there is none.
func (pl *Plane) load(kind, tenant string, into any) (found bool, err error) {
	err = pl.store.View(func(tx store.Tx) error {
		found, err = getRecord(tx, kind, tenant, into)
		return err
	})
	return found, err
}

// records reads the tenant's bootstrap and rollout records in one
// transaction; nil for one there is none of.
func (pl *Plane) records(tenant string) (boot *BootstrapRecord, rec *RolloutRecord, err error) {
	err = pl.store.View(func(tx store.Tx) error {
		var b BootstrapRecord
		var r RolloutRecord
		found, err := getRecord(tx, KindBootstrap, tenant, &b)
		if found {
			boot = &b
		}
		if err == nil {
			if found, err = getRecord(tx, KindRollout, tenant, &r); found {
				rec = &r
			}
		}
		return err
	})
	return boot, rec, err
}

// getRecord reads a record in tx; found is false when there is none.
func getRecord(tx store.Tx, kind, tenant string, into any) (found bool, err error) {
	res, err := tx.Get(kind, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err == nil {
		err = json.Unmarshal(res.Object, into)
	}
	if err != nil {
		return false, fmt.Errorf("read %s record of %s: %w", kind, tenant, err)
	}
	return true, nil
}

// save writes a record.
func (pl *Plane) save(kind, tenant string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record of %s: %w", kind, tenant, err)
	}
	err = pl.store.Update(func(tx store.Tx) error {
		_, err := tx.Put(kind, tenant, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s record of %s: %w", kind, tenant, err)
	}
	return nil
}

// Forget removes a destroyed tenant's records and idle clients.
func (pl *Plane) Forget(tenant string) error {
	pl.pool.Forget(tenant)
	return pl.store.Update(func(tx store.Tx) error {
		for _, kind := range []string{KindBootstrap, KindRollout, KindRestore} {
			if _, err := tx.Delete(kind, tenant); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
}
