package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/backend/webhook"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/replica"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// A server on an etcd store is one replica among those on the same store.
// Every replica serves the whole API, and sends the push webhooks to the
// leader until it leads. Every replica runs the runs of the tenants in
// the shards it holds (owners.go) and observes their machines
// (observe.go); the one elected leader runs the rest of the reconciler's
// part (the source, the commits, drift checks and backups). A leader that
// loses its lease stops that part before the lease can expire, and exits,
// so that its supervisor starts it again as a follower, while another
// replica takes over.

// errLostLead is Run's error when this replica stopped leading while it
// was meant to go on.
var errLostLead = errors.New("this replica lost its lease while it led: it stopped its work before another replica could take over, and exits so that its supervisor starts it again")

// replicaFlags are the settings of a replica (--store etcd).
type replicaFlags struct {
	name, advertise, stateURL string
	leaseTTL                  time.Duration
}

func addReplicaFlags(fs *pflag.FlagSet, f *replicaFlags) {
	fs.StringVar(&f.name, "replica-name", "", "`NAME` of this server among the replicas of one store in etcd (--store etcd), unique among them; default: the host name")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", replica.DefaultTTL, "how long a replica's lease lasts unrenewed (--store etcd): a replica that cannot renew it stops its work within 2/3 of it, and another takes over after it")
	fs.StringVar(&f.stateURL, "state-url", "", "base `URL` through which tofu reaches the state backend (--store etcd): an address that reaches any live replica, such as a load balancer or a Kubernetes Service, so that an apply whose replica dies saves its state through another before the dead replica's lock on it ends; default: this server's own address")
	fs.StringVar(&f.advertise, "advertise-url", "", "base `URL` of this replica's API, as the other replicas and the dashboard show it (--store etcd); default: --external-url, else http://LISTEN")
}

// replicaPrefix is where the replicas of the store under prefix keep
// their membership, leases and election: beside the store's keys, not
// among them.
func replicaPrefix(prefix string) string { return strings.TrimSuffix(prefix, "/") + "-replicas/" }

// openReplica joins the replicas of the store, when it is in etcd: the
// store's writes are fenced by the replica's lease, the status shows the
// replicas and readiness needs the lease.
func (m *Main) openReplica() error {
	f := m.flags
	if m.etcd == nil {
		if f.replica.name != "" || f.replica.stateURL != "" || f.replica.advertise != "" {
			return errors.New("--replica-name, --state-url and --advertise-url go with --store etcd: a server on bbolt runs alone")
		}
		return nil
	}
	name := f.replica.name
	if name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--replica-name is not set and the host name does not read: %w", err)
		}
		name = host
	}
	addr := f.replica.advertise
	if addr == "" {
		addr = f.dashboardURL(m.Server.Addr())
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
	defer cancel()
	r, err := replica.Join(ctx, replica.Config{Client: m.etcd, Prefix: replicaPrefix(f.etcd.prefix), Name: name,
		Address: addr, TTL: f.replica.leaseTTL, Logger: m.log.With("component", "replica")})
	if err != nil {
		return fmt.Errorf("join the replicas in etcd as %q: %w", name, err)
	}
	m.replica = r
	if m.metrics, err = metrics.NewReplica(name); err != nil {
		r.Close()
		return err
	}
	m.Server.Handle("GET /metrics", backend.RequireRole(backend.RoleView, "reading metrics", m.metrics.Handler()))
	m.onClose(func() { r.Close() })
	// The last uses of tokens are written while the lease still fences
	// this replica's writes in (Close runs this before r.Close).
	m.onClose(func() { m.flushLastUsed() })
	st := m.etcdStore
	// State locks are not tied to a lease: tofu's lock requests reach
	// any replica through --state-url, and whichever served one is not
	// its holder. A new leader releases the locks of the reconciler's
	// runs once the old leader's lease is gone (Recover).
	r.OnFence(st.SetFence)
	m.Server.SetReplicas(replicaStatus{r: r, st: st})
	m.Server.SetForward(func() (*url.URL, bool) { return leaderURL(r) })
	if tokens := m.Server.Tokens(); tokens != nil {
		tokens.Share(sharedTokens{r: r, log: m.log})
	}
	m.Server.Sessions().Share(sharedSessions{r: r}, m.Server.Users, m.log.With("component", "sessions"))
	m.hooks = m.Server.LeaderHandler()
	m.Server.HandleUnauthenticated(webhook.Prefix, m.hooks)
	m.Server.AddReadyCheck("replica", func(context.Context) error {
		if !r.Ready() {
			return errors.New("this replica holds no live lease in etcd")
		}
		return nil
	})
	m.log.Info("joined the replicas", "replica", name, "address", addr, "leaseTTL", f.replica.leaseTTL)
	return nil
}

// replicaStatus is the replicas' part of /api/v1/status.
type replicaStatus struct {
	r  *replica.Replica
	st store.Store
}

// ReplicasStatus reports the live replicas, the leader, and the shards
// each holds with the tenants in them: those it runs and whose machines it
// observes.
func (s replicaStatus) ReplicasStatus() *api.ReplicasStatus {
	var tenants []string
	_ = s.st.View(func(tx store.Tx) error {
		return tx.Scan(schema.KindTenant, "", func(res store.Resource) error {
			tenants = append(tenants, res.Name)
			return nil
		})
	})
	rs := s.r.Status(tenants)
	out := &api.ReplicasStatus{Self: rs.Self, Leader: rs.Leader, Shards: rs.Shards, Unowned: rs.Unowned, Members: []api.ReplicaStatus{}}
	for _, m := range rs.Members {
		out.Members = append(out.Members, api.ReplicaStatus{Name: m.Name, Address: m.Address, Since: m.Since, Leader: m.Leader,
			Shards: m.Shards, Tenants: m.Tenants})
	}
	return out
}

// replicaGate is the Talos plane's gate (talos.Options.Gate) on a
// replica: no call disrupts a machine unless the replica's lease was
// renewed within 2/3 of its TTL, so that a replica paused past its lease
// makes none when it runs again, before it notices that it was fenced.
// nil on a server alone.
func (m *Main) replicaGate() func() error {
	if m.replica == nil {
		return nil
	}
	r := m.replica
	return func() error {
		if !r.Ready() {
			return errors.New("this replica's lease may have ended: it was not renewed in time")
		}
		return nil
	}
}

// leaderURL is the API address of the leader, when another replica
// leads: the API sends it what only the leader serves (see
// backend.Forward).
func leaderURL(r *replica.Replica) (*url.URL, bool) {
	st := r.Status(nil)
	if st.Leader == "" || st.Leader == st.Self {
		return nil, false
	}
	for _, m := range st.Members {
		if m.Name == st.Leader {
			u, err := url.Parse(m.Address)
			return u, err == nil && u.Host != ""
		}
	}
	return nil, false
}

// lead waits until this replica leads, and runs the reconciler's part for
// as long as it does. It returns when ctx ends (nil) or when the lead was
// lost (errLostLead), after the part stopped.
func (m *Main) lead(ctx context.Context) error {
	for {
		changed := m.replica.Changed()
		if lctx, ok := m.replica.Leader(); ok {
			m.log.Info("this replica leads: reconciling")
			if err := m.rec.mount(); err != nil {
				return fmt.Errorf("this replica leads, but its reconciler does not open: %w", err)
			}
			runCtx, stop := context.WithCancel(ctx)
			wait := m.rec.start(runCtx)
			select {
			case <-ctx.Done():
			case <-lctx.Done():
			}
			stop()
			wait()
			if ctx.Err() != nil {
				return nil
			}
			return errLostLead
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// runReplica runs the replica's membership and, with a source, leads
// when elected (lead), until ctx ends; a lost lead is sent on lost. The
// returned function waits until both have stopped.
func (m *Main) runReplica(ctx context.Context, lost chan<- error) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.replica.Run(ctx); err != nil && ctx.Err() == nil {
			tell(lost, fmt.Errorf("the replica's membership in etcd ended: %w", err))
		}
	})
	wg.Go(func() { m.watchReplicas(ctx) })
	wg.Go(func() { m.observe(ctx) })
	if m.rec != nil {
		// The runs of the tenants this replica owns stop with it, while
		// the state backend still answers; a leader's stop with its
		// source's (reconcilerPart.start).
		wg.Go(func() {
			<-ctx.Done()
			m.rec.rec.Close()
		})
	}
	if m.src != nil {
		wg.Go(func() {
			if err := m.lead(ctx); err != nil {
				tell(lost, err)
			}
		})
	}
	return wg.Wait
}

// tell sends err on lost unless an error is there already: Run stops at
// the first.
func tell(lost chan<- error, err error) {
	select {
	case lost <- err:
	default:
	}
}

// stopGrace is how long running tofu processes may finish at a stop:
// --shutdown-grace, and on a replica at most a sixth of its lease, so that
// a replica that fences itself (at 2/3 of the lease) has interrupted its
// tofu runs, and they have saved their state, before the lease can expire.
func (f *serveFlags) stopGrace() time.Duration {
	if f.store != engineEtcd {
		return f.shutdownGrace
	}
	return min(f.shutdownGrace, f.replica.leaseTTL/6)
}

// stateURL is the base URL of the state backend that tofu gets: own, this
// server's address, unless a replica was given --state-url.
func (f *serveFlags) stateURL(own string) string {
	if f.store == engineEtcd && f.replica.stateURL != "" {
		return f.replica.stateURL
	}
	return own
}

// sharedTokens keeps the digests of the credentials a replica hands to
// its tofu runs in etcd, bound to the replica's lease, so that tofu's
// state requests are accepted by whichever replica --state-url reaches,
// also after the replica that ran it died; and those of local users'
// logins, so that every live replica accepts them.
type sharedTokens struct {
	r   *replica.Replica
	log *slog.Logger
}

// sharedIdentity is how a shared credential's identity is stored.
type sharedIdentity struct {
	Name    string         `json:"name"`
	Role    backend.Role   `json:"role"`
	Source  backend.Source `json:"source,omitempty"`
	Expires time.Time      `json:"expires,omitzero"`
}

func (s sharedTokens) Share(digest [sha256.Size]byte, id backend.Identity) (func(), error) {
	b, err := json.Marshal(sharedIdentity{Name: id.Name, Role: id.Role, Source: id.Source, Expires: id.Expires})
	if err != nil {
		return nil, err
	}
	remove, err := s.r.ShareToken(context.Background(), digest[:], b)
	if err != nil {
		s.log.Warn("a credential is not shared with the other replicas: only this one accepts it", "who", id.Name, "source", string(id.Source), "err", err)
	}
	return remove, err
}

func (s sharedTokens) Find(digest [sha256.Size]byte) (backend.Identity, bool) {
	b, ok, err := s.r.SharedToken(context.Background(), digest[:])
	if err != nil {
		s.log.Warn("look up a credential shared by another replica", "err", err)
	}
	var id sharedIdentity
	if !ok || json.Unmarshal(b, &id) != nil {
		return backend.Identity{}, false
	}
	src := id.Source
	if src == "" {
		src = backend.SourceToken
	}
	return backend.Identity{Name: id.Name, Role: id.Role, Source: src, Expires: id.Expires}, true
}

func (s sharedTokens) Revoke(digest [sha256.Size]byte) error {
	return s.r.RevokeToken(context.Background(), digest[:])
}

// sharedSessions keeps the dashboard's sessions in etcd, each under a
// lease that ends with it, so that every replica accepts a session that
// another made, also after that one stopped (backend.SharedSessions).
type sharedSessions struct{ r *replica.Replica }

func (s sharedSessions) PutSession(digest [sha256.Size]byte, rec backend.SessionRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.r.ShareSession(context.Background(), digest[:], b, rec.Expires)
}

func (s sharedSessions) FindSession(digest [sha256.Size]byte) (backend.SessionRecord, bool, error) {
	var rec backend.SessionRecord
	b, ok, err := s.r.SharedSession(context.Background(), digest[:])
	if err != nil || !ok {
		return rec, false, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, false, fmt.Errorf("a shared dashboard session does not read: %w", err)
	}
	return rec, true, nil
}

func (s sharedSessions) DeleteSession(digest [sha256.Size]byte) error {
	return s.r.RevokeSession(context.Background(), digest[:])
}
