package backend

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// StatusFunc fills the members of /api/v1/status that the server does not
// own: Source and Reconciler. It is called on every request, concurrently,
// and must be quick; the members it sets to anything but Source and
// Reconciler are overwritten (Replicas with what SetReplicas gives).
type StatusFunc func(*api.Status)

// SetStatus makes /api/v1/status include what f reports; nil removes it.
// It may be called while the server runs.
func (s *Server) SetStatus(f StatusFunc) {
	if f == nil {
		s.api.status.Store(nil)
		return
	}
	s.api.status.Store(&f)
}

// ReplicaSource reports the replicas of a server that runs as one of
// several on one etcd: who they are, which leads, and what each owns. It
// is called on every status request, concurrently, and must be quick.
type ReplicaSource interface {
	ReplicasStatus() *api.ReplicasStatus
}

// replicaSource holds a ReplicaSource in an atomic.Pointer.
type replicaSource struct{ ReplicaSource }

// SetReplicas makes /api/v1/status, and so the dashboard's overview,
// include the replicas src reports; nil removes them. It may be called
// while the server runs.
func (s *Server) SetReplicas(src ReplicaSource) {
	if src == nil {
		s.api.replicas.Store(nil)
		return
	}
	s.api.replicas.Store(&replicaSource{src})
}

// serveStatus answers /api/v1/status: the status function's members, the
// server's own status and the counts of resources.
func (a *resourceAPI) serveStatus(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	body, err := a.statusBody()
	if err != nil {
		a.internal(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, body)
}

// Status returns the body of /api/v1/status as a request would get it now.
func (s *Server) Status() (api.Status, error) { return s.api.statusBody() }

func (a *resourceAPI) statusBody() (api.Status, error) {
	var body api.Status
	if f := a.status.Load(); f != nil {
		if err := callStatus("status function", *f, &body); err != nil {
			a.log.Error("status", "err", err)
			body = api.Status{Error: err.Error()}
		}
	}
	body.Replicas = nil
	if src := a.replicas.Load(); src != nil {
		err := callStatus("replica source", func(st *api.Status) { st.Replicas = src.ReplicasStatus() }, &body)
		if err != nil {
			a.log.Error("status of the replicas", "err", err)
			body.Replicas, body.Error = nil, joinProblems(body.Error, err.Error())
		}
	}
	up := time.Since(a.started).Truncate(time.Second)
	body.Server = api.ServerStatus{
		Version:       a.version,
		StartedAt:     a.started.UTC().Truncate(time.Second),
		Uptime:        up.String(),
		UptimeSeconds: int64(up / time.Second),
	}
	err := a.store.View(func(tx store.Tx) error {
		body.Server.ResourceVersion = strconv.FormatUint(tx.ResourceVersion(), 10)
		body.Counts = api.ResourceCounts{
			Tenants:       tx.Count(schema.KindTenant),
			NodeGroups:    tx.Count(schema.KindNodeGroup),
			ConfigPatches: tx.Count(schema.KindConfigPatch),
			Machines:      tx.Count(schema.KindMachine),
			Commits:       tx.Count(schema.KindCommit),
		}
		return nil
	})
	return body, err
}

// callStatus calls f, what it is, turning a panic into an error.
func callStatus(what string, f StatusFunc, st *api.Status) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s panicked: %v", what, v)
		}
	}()
	f(st)
	return nil
}

// joinProblems joins the non-empty of a and b with "; ".
func joinProblems(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
