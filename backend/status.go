package backend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
)

// StatusProvider adds to the body of /api/v1/status. Status must return a
// value that encodes as a JSON object (a struct or a map); each of its
// members appears in the body beside "server" and "counts", such as
// "source" and "reconciler". Members named "server" or "counts" are
// dropped. Status is called on every request, concurrently, and must be
// quick.
type StatusProvider interface {
	Status() any
}

// StatusFunc adapts a function to StatusProvider.
type StatusFunc func() any

// Status calls f.
func (f StatusFunc) Status() any { return f() }

type statusSlot struct{ p StatusProvider }

// SetStatus makes /api/v1/status include what p reports; nil removes it.
// It may be called while the server runs.
func (s *Server) SetStatus(p StatusProvider) {
	if p == nil {
		s.api.status.Store(nil)
		return
	}
	s.api.status.Store(&statusSlot{p})
}

// ServerStatus is the "server" member of /api/v1/status.
type ServerStatus struct {
	Version   string    `json:"version"`
	StartedAt time.Time `json:"startedAt"`
	// Uptime is a Go duration, whole seconds, e.g. "1h2m3s".
	Uptime        string `json:"uptime"`
	UptimeSeconds int64  `json:"uptimeSeconds"`
	// ResourceVersion is the store's latest resourceVersion.
	ResourceVersion string `json:"resourceVersion"`
}

// ResourceCounts is the "counts" member of /api/v1/status: how many of
// each kind the store holds.
type ResourceCounts struct {
	Tenants       int `json:"tenants"`
	NodeGroups    int `json:"nodeGroups"`
	ConfigPatches int `json:"configPatches"`
	Machines      int `json:"machines"`
	Commits       int `json:"commits"`
}

// serveStatus answers /api/v1/status: the server's own status and counts
// of resources, merged with the status provider's members.
func (a *resourceAPI) serveStatus(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	up := time.Since(a.started).Truncate(time.Second)
	server := ServerStatus{
		Version:       a.version,
		StartedAt:     a.started.UTC().Truncate(time.Second),
		Uptime:        up.String(),
		UptimeSeconds: int64(up / time.Second),
	}
	var counts ResourceCounts
	err := a.store.View(func(tx *Tx) error {
		server.ResourceVersion = strconv.FormatUint(tx.ResourceVersion(), 10)
		counts = ResourceCounts{
			Tenants:       countKind(tx, schema.KindTenant),
			NodeGroups:    countKind(tx, schema.KindNodeGroup),
			ConfigPatches: countKind(tx, schema.KindConfigPatch),
			Machines:      countKind(tx, schema.KindMachine),
			Commits:       countKind(tx, schema.KindCommit),
		}
		return nil
	})
	if err != nil {
		a.internal(w, r, err)
		return
	}
	body := map[string]any{}
	if slot := a.status.Load(); slot != nil {
		members, err := statusMembers(slot.p)
		if err != nil {
			a.log.Error("status provider", "err", err)
			body["statusError"] = err.Error()
		}
		for k, v := range members {
			body[k] = v
		}
	}
	body["server"] = server
	body["counts"] = counts
	api.WriteJSON(w, http.StatusOK, body)
}

// statusMembers encodes what p reports and splits it into members.
func statusMembers(p StatusProvider) (members map[string]json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			members, err = nil, fmt.Errorf("status provider panicked: %v", v)
		}
	}()
	b, err := json.Marshal(p.Status())
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	if err := json.Unmarshal(b, &members); err != nil || members == nil {
		return nil, fmt.Errorf("status provider returned %.40s, not a JSON object", b)
	}
	return members, nil
}

// countKind counts the stored objects of kind without reading them.
func countKind(tx *Tx, kind string) int {
	b := resourceBucket(tx, kind)
	if b == nil {
		return 0
	}
	n := 0
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			n++
		}
	}
	return n
}
