// Command rezuscloud is the RezusCloud server: `serve` reconciles a
// repository and serves the Terraform HTTP state backend, the read-only
// API and the dashboard; `demo` runs it on the examples; `token` makes
// access tokens; `store` backs up and restores its store. See `rezuscloud serve --help`. It owns flags, wiring and
// signals only: the work is done by the packages it wires.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/ui"
	"github.com/rezuscloud/rezuscloud/events"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/replica"
	"github.com/rezuscloud/rezuscloud/sources"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

func main() {
	cmd := newRootCmd(os.Getenv)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "rezuscloud:", err)
		os.Exit(1)
	}
}

// Main is the server that `serve` and `demo` run: the store, the state
// backend and the API, and, with a source, the reconciler and what runs
// beside it (see reconcile.go). Open builds it and binds its address; Run
// runs it until its context ends and then stops it in order; Close
// releases whatever Open built, and may be called after Run too.
type Main struct {
	flags *serveFlags
	log   *slog.Logger

	Server *backend.Server
	// audit is the audit log (see openAudit).
	audit  *slog.Logger
	src    sources.Source
	origin backend.Origin
	// rec is the reconciler's part; nil without a source. A replica
	// builds it at Open too, and mounts its API and runs its source once
	// it leads. recMu guards it once Run runs.
	recMu sync.Mutex
	rec   *reconcilerPart
	// etcd and etcdStore are the client and the store with --store etcd,
	// where the server is a replica (see replicas.go); else nil.
	etcd      *clientv3.Client
	etcdStore *etcdstore.Store
	replica   *replica.Replica
	// plane is a replica's Talos plane, which observes the machines of
	// the tenants it owns and which its reconciler uses once it leads;
	// bundles reads the secrets bundles its observer needs, and now is
	// the test clock (nil: the real one). See observe.go. nil on a server
	// alone, whose reconciler's part has its own.
	plane   *talos.Plane
	bundles *reconciler.StoredBundles
	now     func() time.Time
	// metrics are a replica's, labelled with its name, which it serves
	// from the start; nil on a server alone (see reconcilerPart.metrics).
	metrics *metrics.Metrics
	// hooks serves the push webhooks on a replica: the leader's, until
	// this replica leads (see backend.LeaderHandler); nil on a server
	// alone, which mounts its webhooks with its reconciler.
	hooks *backend.LeaderHandler
	// pprof serves runtime profiles; nil without --pprof-listen.
	pprof *pprofListener
	// notifier sends notifications, and events derives them from the
	// store's changes; nil without --notifications (events also without
	// a source). See notifications.go.
	notifier *notify.Notifier
	events   *events.Deriver

	closeOnce sync.Once
	closers   []func()

	// say tells whoever started the server what a stop waits for and
	// when it is over (see stopping); nil: the log, at level info.
	say func(string)
	// resume says how to go on where a stop left off.
	resume string
}

// NewMain returns a Main for the settings f, which read the environment
// through f.getenv (main passes os.Getenv, tests their own).
func NewMain(f *serveFlags, log *slog.Logger) *Main {
	return &Main{flags: f, log: log, resume: "start the server again on the same data dir to resume where it left off"}
}

// onClose adds fn to what Close runs, in reverse order of adding.
func (m *Main) onClose(fn func()) { m.closers = append(m.closers, fn) }

// Open builds the server and binds its address, then, with --repo or
// --dir, the source and the reconciler, which clears what an earlier
// process left (Recover). Nothing serves or runs yet.
func (m *Main) Open() error {
	for _, open := range []func() error{m.openServer, m.openReplica, m.openObserver, m.openPprof, m.openReconciler, m.openNotifications} {
		if err := open(); err != nil {
			m.Close()
			return err
		}
	}
	return nil
}

func (m *Main) openServer() error {
	cfg, err := serverConfig(m.flags, m.log)
	if err != nil {
		return err
	}
	m.src, m.origin, err = newSource(m.flags, m.log)
	if err != nil {
		return err
	}
	cfg.Origin = m.origin
	if m.etcdStore, m.etcd, err = serveStore(context.Background(), m.flags, m.log); err != nil {
		return err
	}
	if m.etcd != nil {
		cli := m.etcd
		m.onClose(func() { cli.Close() })
		cfg.Store = m.etcdStore
	}
	if m.Server, err = backend.NewServer(cfg); err != nil {
		if m.etcdStore != nil {
			m.etcdStore.Close()
		}
		return err
	}
	m.onClose(func() { m.Server.Close() })
	if m.audit, err = openAudit(m.flags.data); err != nil {
		return err
	}
	m.Server.SetAudit(m.audit)
	if err := m.openUsers(); err != nil {
		return err
	}
	dash := ui.Options{ExternalURL: m.flags.dashboardURL(""), Origin: m.origin, Logger: m.log.With("component", "dashboard")}
	if dash.SSO, err = m.openOIDC(); err != nil {
		return err
	}
	if err := ui.Serve(m.Server, dash); err != nil {
		return err
	}
	return m.Server.Listen()
}

// Run serves and reconciles until ctx ends or the server fails. It stops
// the reconciler first, while the state backend still answers, so that the
// tofu runs it interrupts can save their state and release their locks;
// then the server shuts down and closes the store.
func (m *Main) Run(ctx context.Context) error {
	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	m.servePprof()
	wait, lost := func() {}, make(chan error, 1)
	switch {
	case m.replica != nil:
		wait = m.runReplica(recCtx, lost)
	case m.rec != nil:
		wait = m.rec.start(recCtx)
	}
	srvCtx, stopServer := context.WithCancel(context.Background())
	defer stopServer()
	served := make(chan error, 1)
	go func() { served <- m.Server.Run(srvCtx) }()
	var err error
	select {
	case err = <-lost:
		m.log.Error("stopping", "err", err)
		stopRec()
		wait()
		stopServer()
		<-served
	case <-ctx.Done():
		m.stopping()
		if m.replica != nil {
			m.flushLastUsed()
		}
		stopRec()
		wait()
		stopServer()
		err = <-served
		if err == nil {
			m.tell("stopped; " + m.resume)
		}
	case err = <-served:
		stopRec()
		wait()
	}
	m.Close()
	return err
}

// flushLastUsed writes the last uses of tokens to the store; on a
// replica, before its lease ends and the store refuses its writes.
func (m *Main) flushLastUsed() {
	if err := m.Server.FlushLastUsed(); err != nil {
		m.log.Warn("record the last use of tokens", "err", err)
	}
}

// stopping says what a stop waits for: the tenant runs in progress, which
// get --shutdown-grace to finish before tofu is interrupted (and saves
// its state), and the runs that wait in the queue, which the next start
// runs.
func (m *Main) stopping() {
	msg := "stopping"
	m.recMu.Lock()
	rec := m.rec
	m.recMu.Unlock()
	if rec != nil {
		q := rec.rec.Queue()
		if n := q.Running(); n > 0 {
			msg += fmt.Sprintf(": waiting for %s to finish (up to %s, then tofu is interrupted and saves its state)",
				plural(n, "tenant run"), m.flags.shutdownGrace)
		}
		if n := q.Depth(); n > 0 {
			msg += fmt.Sprintf("; %s in the queue will wait for the next start", plural(n, "tenant run"))
		}
	}
	m.tell(msg + "…")
}

// tell says msg to whoever started the server.
func (m *Main) tell(msg string) {
	if m.say != nil {
		m.say(msg)
		return
	}
	m.log.Info(msg)
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// Close releases what Open built, last first. It is safe to call more
// than once.
func (m *Main) Close() {
	m.closeOnce.Do(func() {
		for _, fn := range slices.Backward(m.closers) {
			fn()
		}
	})
}
