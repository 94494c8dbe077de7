package backend

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/labels"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Paging of list endpoints: `limit` defaults to DefaultListLimit and may be
// 1 to MaxListLimit; `offset` defaults to 0.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// APIPrefix is where the read-only resource API is mounted.
const APIPrefix = "/api/v1/"

// commitPrefixMin is the shortest revision prefix a commit lookup accepts.
const commitPrefixMin = 7

// Origin says where the manifests the server applies come from, so that a
// refused write can tell its sender what to change instead.
type Origin struct {
	// Repo is the repository URL, or the directory of a directory source.
	Repo string
	// Ref is the ref the server follows, e.g. refs/heads/main. It is empty
	// for a directory source.
	Ref string
	// Path is the directory of manifests inside Repo; empty means all of it.
	Path string
}

// readOnlyMessage tells a writer where to change resources instead.
func (o Origin) readOnlyMessage() string {
	if o.Repo == "" {
		return "resources are read-only: change the manifests in the git repository this server watches and push"
	}
	if o.Ref == "" {
		where := o.Repo
		if o.Path != "" {
			where += " (path " + o.Path + ")"
		}
		return "resources are read-only: change the manifests in " + where + "; the server applies them when they change"
	}
	where := o.Repo + " (ref " + o.Ref
	if o.Path != "" {
		where += ", path " + o.Path
	}
	return "resources are read-only: change the manifests in " + where + ") and push"
}

// resourceAPI serves the read-only REST API over the store's resources on
// APIPrefix, and /api/v1/status. It serves only the kinds it routes
// (Tenant, NodeGroup, ConfigPatch, Machine, Provider, Commit); the
// reconciler's internal records are never reachable. Lists answer
// {"items":[…],"total":N} in name order (commits newest first) and take
// offset, limit and labelSelector; objects are served as stored, their
// metadata.resourceVersion included. Every other method gets 405
// naming the Origin. It expects Authenticate in front of it and needs the
// view role.
type resourceAPI struct {
	store   store.Store
	log     *slog.Logger
	origin  Origin
	version string
	started time.Time
	status  atomic.Pointer[StatusFunc]
	// replicas reports the replicas in the status; see SetReplicas.
	replicas atomic.Pointer[replicaSource]
	// forward sends on what has no route here; see SetForward.
	forward atomic.Pointer[Forward]
	router  *httprouter.Router

	// hub and heartbeat serve watches; see watch.go.
	hub       *Hub
	heartbeat time.Duration
}

func newResourceAPI(st store.Store, hub *Hub, heartbeat time.Duration, log *slog.Logger, origin Origin, version string) *resourceAPI {
	a := &resourceAPI{store: st, hub: hub, heartbeat: heartbeat, log: log, origin: origin, version: version, started: time.Now()}
	r := httprouter.New()
	r.RedirectFixedPath = false
	r.HandleOPTIONS = false
	r.HandleMethodNotAllowed = true
	r.MethodNotAllowed = http.HandlerFunc(a.methodNotAllowed)
	r.NotFound = http.HandlerFunc(a.notFound)
	r.PanicHandler = a.panicked

	r.GET("/api/v1/tenants", a.listTenants)
	r.GET("/api/v1/tenants/:tenant", a.getTenant)
	r.GET("/api/v1/tenants/:tenant/events", a.watchRoute(func(p httprouter.Params) watchScope {
		return tenantScope(p.ByName("tenant"))
	}))
	r.GET("/api/v1/tenants/:tenant/node-groups", a.listScoped(schema.KindNodeGroup))
	r.GET("/api/v1/tenants/:tenant/node-groups/:name", a.getScoped(schema.KindNodeGroup))
	r.GET("/api/v1/tenants/:tenant/node-groups/:name/events", a.watchRoute(func(p httprouter.Params) watchScope {
		return nodeGroupScope(p.ByName("tenant"), p.ByName("name"))
	}))
	r.GET("/api/v1/tenants/:tenant/patches", a.listScoped(schema.KindConfigPatch))
	r.GET("/api/v1/tenants/:tenant/patches/:name", a.getScoped(schema.KindConfigPatch))
	r.GET("/api/v1/tenants/:tenant/machines", a.listTenantMachines)
	r.GET("/api/v1/tenants/:tenant/machines/:name", a.getTenantMachine)
	r.GET("/api/v1/machines", a.listAll(schema.KindMachine))
	r.GET("/api/v1/machines/:name", a.eventsOr(watchScope{{kind: schema.KindMachine}}, a.getOne(schema.KindMachine)))
	r.GET("/api/v1/providers", a.listAll(schema.KindProvider))
	r.GET("/api/v1/providers/:name", a.getOne(schema.KindProvider))
	r.GET("/api/v1/providers/:name/events", a.watchRoute(func(p httprouter.Params) watchScope {
		return watchScope{{kind: schema.KindProvider, key: p.ByName("name")}}
	}))
	r.GET("/api/v1/commits", a.listCommits)
	r.GET("/api/v1/commits/:name", a.eventsOr(watchScope{{kind: schema.KindCommit}}, a.getCommit))
	r.GET("/api/v1/status", a.serveStatus)
	a.router = r
	return a
}

func (a *resourceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		// net/http drops the body of a HEAD answer; route it as GET. A
		// watch answers a HEAD with its headers only.
		r = r.WithContext(withHead(r.Context()))
		r.Method = http.MethodGet
	}
	if _, ok := requireRole(w, r, RoleView, "reading resources"); !ok {
		return
	}
	a.router.ServeHTTP(w, r)
}

func (a *resourceAPI) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if a.forwarded(w, r) {
		return
	}
	w.Header().Set("Allow", "GET, HEAD")
	switch r.Method {
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
		api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: %s", r.Method, r.URL.Path, a.origin.readOnlyMessage()))
	default:
		api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: the API is read-only; use GET", r.Method, r.URL.Path))
	}
}

func (a *resourceAPI) notFound(w http.ResponseWriter, r *http.Request) {
	if a.forwarded(w, r) {
		return
	}
	api.WriteError(w, api.Errorf(http.StatusNotFound, "no such resource %s", r.URL.Path))
}

func (a *resourceAPI) panicked(w http.ResponseWriter, r *http.Request, v any) {
	a.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
	api.WriteError(w, errors.New("panic"))
}

// internal logs err and answers 500 without repeating it.
func (a *resourceAPI) internal(w http.ResponseWriter, r *http.Request, err error) {
	a.log.Error("serve resources", "method", r.Method, "path", r.URL.Path, "err", err)
	api.WriteError(w, err)
}

// writeResult writes the outcome of a handler's store read: an *api.Error
// as itself, another error as a logged 500, and otherwise body. Encoding
// body checks the stored objects in it, which are served as they are: one
// that is not JSON (a damaged store) is a logged 500 too.
func (a *resourceAPI) writeResult(w http.ResponseWriter, r *http.Request, body any, err error) {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		api.WriteError(w, ae)
	case err != nil:
		a.internal(w, r, err)
	default:
		b, err := json.Marshal(body)
		if err != nil {
			a.internal(w, r, fmt.Errorf("encode answer: a stored object is not JSON: %w", err))
			return
		}
		api.WriteBody(w, http.StatusOK, b)
	}
}

// listQuery is the paging and filtering of a list request.
type listQuery struct {
	offset, limit int
	sel           labels.Selector
}

// parseListQuery reads offset, limit and labelSelector, and ignores every
// other parameter.
func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{limit: DefaultListLimit}
	if s, ok := first(q, "offset"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return lq, api.Errorf(http.StatusBadRequest, "offset %q: want a whole number, 0 or more", s)
		}
		lq.offset = n
	}
	if s, ok := first(q, "limit"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return lq, api.Errorf(http.StatusBadRequest, "limit %q: want a whole number from 1 to %d (default %d)", s, MaxListLimit, DefaultListLimit)
		}
		lq.limit = n
	}
	if s, ok := first(q, "labelSelector"); ok {
		sel, err := labels.Parse(s)
		if err != nil {
			return lq, api.Errorf(http.StatusBadRequest, "labelSelector: %v", err)
		}
		lq.sel = sel
	}
	return lq, nil
}

func first(q url.Values, key string) (string, bool) {
	v, ok := q[key]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// listSpec says which stored objects of one kind a list answers with.
type listSpec struct {
	kind string
	// tenant keeps only the objects that belong to it (see
	// store.Tx.TenantObjects).
	tenant string
	// newestFirst orders by metadata.createdAt, newest first, then by
	// key; otherwise the order is by key.
	newestFirst bool
}

// hit is a matching stored object; obj points into the transaction's
// memory and is valid only inside it.
type hit struct {
	obj     []byte
	created int64 // Unix nanoseconds
}

// list answers a list request from one read transaction. The metadata of
// an object is decoded, and only the part the filter or the order needs,
// when they need it; only the objects of the requested page are copied
// out. Encoding the answer checks that they are JSON (see writeResult).
func list(tx store.Tx, spec listSpec, q listQuery) (api.List[json.RawMessage], error) {
	out := api.List[json.RawMessage]{Items: []json.RawMessage{}}
	var hits []hit
	visit := func(r store.Resource) error {
		h := hit{obj: r.Object}
		if len(q.sel) > 0 {
			var head store.MetaHead
			if err := r.DecodeMeta(&head); err != nil {
				return err
			}
			if !q.sel.Matches(head.Labels) {
				return nil
			}
		}
		if spec.newestFirst {
			created, err := r.CreatedAt()
			if err != nil {
				return err
			}
			if !created.IsZero() {
				h.created = created.UnixNano()
			}
		}
		hits = append(hits, h)
		return nil
	}
	var err error
	if spec.tenant != "" {
		err = tx.TenantObjects(spec.tenant, spec.kind, visit)
	} else {
		err = tx.Scan(spec.kind, "", visit)
	}
	if err != nil {
		return out, err
	}
	if spec.newestFirst {
		// The scan gave key order; a stable sort keeps it among equals.
		slices.SortStableFunc(hits, func(x, y hit) int { return cmp.Compare(y.created, x.created) })
	}
	out.Total = len(hits)
	start := min(q.offset, len(hits))
	end := min(start+q.limit, len(hits))
	for _, h := range hits[start:end] {
		out.Items = append(out.Items, bytes.Clone(h.obj))
	}
	return out, nil
}

// getServed returns the stored object kind/key as served, or nil when it
// does not exist.
func getServed(tx store.Tx, kind, key string) (json.RawMessage, error) {
	r, err := tx.Get(kind, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return r.Object, err
}

// kindWord is how messages name one object of kind.
func kindWord(kind string) string {
	k, _ := schema.LookupKind(kind)
	return k.Word
}

func notFound(kind, name string) *api.Error {
	return api.Errorf(http.StatusNotFound, "%s %q not found", kindWord(kind), name)
}

// needTenant returns a 404 naming the tenant unless it exists.
func needTenant(tx store.Tx, tenant string) error {
	if _, err := tx.Get(schema.KindTenant, tenant); errors.Is(err, store.ErrNotFound) {
		return api.Errorf(http.StatusNotFound, "tenant %q not found; GET %stenants lists the tenants", tenant, APIPrefix)
	} else if err != nil {
		return err
	}
	return nil
}

// serveList parses the list query and answers with list(spec) unless check
// (when given) fails first in the same transaction. With ?watch=true it
// serves a watch of the list's scope instead, without check.
func (a *resourceAPI) serveList(w http.ResponseWriter, r *http.Request, spec listSpec, check func(store.Tx) error) {
	if watch, err := wantsWatch(r.URL.Query()); err != nil {
		api.WriteError(w, err)
		return
	} else if watch {
		a.serveWatch(w, r, listScope(spec))
		return
	}
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		api.WriteError(w, err)
		return
	}
	var body api.List[json.RawMessage]
	err = a.store.View(func(tx store.Tx) error {
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		body, err = list(tx, spec, q)
		return err
	})
	a.writeResult(w, r, body, err)
}

func (a *resourceAPI) listTenants(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	a.serveList(w, r, listSpec{kind: schema.KindTenant}, nil)
}

func (a *resourceAPI) getTenant(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	name := p.ByName("tenant")
	var obj json.RawMessage
	err := a.store.View(func(tx store.Tx) (err error) {
		if obj, err = getServed(tx, schema.KindTenant, name); err == nil && obj == nil {
			err = needTenant(tx, name)
		}
		return err
	})
	a.writeResult(w, r, obj, err)
}

// listAll lists every stored object of kind.
func (a *resourceAPI) listAll(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		a.serveList(w, r, listSpec{kind: kind}, nil)
	}
}

// getOne serves the object of kind named by the route's name.
func (a *resourceAPI) getOne(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		name := p.ByName("name")
		var obj json.RawMessage
		err := a.store.View(func(tx store.Tx) (err error) {
			if obj, err = getServed(tx, kind, name); err == nil && obj == nil {
				err = notFound(kind, name)
			}
			return err
		})
		a.writeResult(w, r, obj, err)
	}
}

// listScoped lists a tenant's objects of a kind keyed TENANT/NAME.
func (a *resourceAPI) listScoped(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant := p.ByName("tenant")
		a.serveList(w, r, listSpec{kind: kind, tenant: tenant}, func(tx store.Tx) error {
			return needTenant(tx, tenant)
		})
	}
}

// getScoped serves one object of a tenant-scoped kind keyed TENANT/NAME.
func (a *resourceAPI) getScoped(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant, name := p.ByName("tenant"), p.ByName("name")
		var obj json.RawMessage
		err := a.store.View(func(tx store.Tx) (err error) {
			if err := needTenant(tx, tenant); err != nil {
				return err
			}
			if obj, err = getServed(tx, kind, tenant+"/"+name); err == nil && obj == nil {
				err = api.Errorf(http.StatusNotFound, "%s %q not found in tenant %q", kindWord(kind), name, tenant)
			}
			return err
		})
		a.writeResult(w, r, obj, err)
	}
}

func (a *resourceAPI) listTenantMachines(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant := p.ByName("tenant")
	a.serveList(w, r, listSpec{kind: schema.KindMachine, tenant: tenant}, func(tx store.Tx) error {
		return needTenant(tx, tenant)
	})
}

func (a *resourceAPI) getTenantMachine(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant, name := p.ByName("tenant"), p.ByName("name")
	var obj json.RawMessage
	err := a.store.View(func(tx store.Tx) (err error) {
		if err := needTenant(tx, tenant); err != nil {
			return err
		}
		m, err := tx.Get(schema.KindMachine, name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			var head store.MetaHead
			if err := m.DecodeMeta(&head); err != nil {
				return err
			}
			if meta := head.Meta(); schema.TenantOf(schema.KindMachine, &meta) == tenant {
				obj = m.Object
			}
		}
		if obj == nil {
			return api.Errorf(http.StatusNotFound, "machine %q not found in tenant %q", name, tenant)
		}
		return nil
	})
	a.writeResult(w, r, obj, err)
}

func (a *resourceAPI) listCommits(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	a.serveList(w, r, listSpec{kind: schema.KindCommit, newestFirst: true}, nil)
}

// getCommit serves a commit by its full revision, written with ":" or
// "-", or by a unique prefix of at least commitPrefixMin characters. For
// the content hashes of a directory source ("sha256-…") the prefix may
// leave out "sha256-".
func (a *resourceAPI) getCommit(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	rev := p.ByName("name")
	key := schema.CommitName(rev)
	var obj json.RawMessage
	err := a.store.View(func(tx store.Tx) (err error) {
		if obj, err = getServed(tx, schema.KindCommit, key); err != nil || obj != nil {
			return err
		}
		if len(key) < commitPrefixMin {
			return api.Errorf(http.StatusNotFound, "commit %q not found; give the full revision or a unique prefix of at least %d characters", rev, commitPrefixMin)
		}
		matches, err := commitsWithPrefix(tx, key)
		if err != nil {
			return err
		}
		switch len(matches) {
		case 0:
			return api.Errorf(http.StatusNotFound, "commit %q not found; GET %scommits lists the recorded commits", rev, APIPrefix)
		case 1:
			obj, err = getServed(tx, schema.KindCommit, matches[0])
			return err
		}
		shown := matches[:min(len(matches), 5)]
		more := ""
		if len(matches) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(matches)-len(shown))
		}
		return api.Errorf(http.StatusBadRequest, "commit prefix %q is ambiguous: it matches %s%s; give more characters", rev, strings.Join(shown, ", "), more)
	})
	a.writeResult(w, r, obj, err)
}

// commitsWithPrefix returns the names of the commits that start with
// prefix, or with "sha256-" and prefix.
func commitsWithPrefix(tx store.Tx, prefix string) ([]string, error) {
	prefixes := []string{prefix}
	if !strings.HasPrefix(prefix, "sha256-") {
		prefixes = append(prefixes, "sha256-"+prefix)
	}
	var names []string
	for _, p := range prefixes {
		err := tx.Scan(schema.KindCommit, p, func(r store.Resource) error {
			names = append(names, r.Name)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}
