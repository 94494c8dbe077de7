package backend

import (
	"bytes"
	"encoding/binary"
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
	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/labels"
	"github.com/rezuscloud/rezuscloud/schema"
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
// offset, limit and labelSelector; objects are served as stored, with
// metadata.resourceVersion set from the store. Every other method gets 405
// naming the Origin. It expects Authenticate in front of it and needs the
// view role.
type resourceAPI struct {
	store   *Store
	log     *slog.Logger
	origin  Origin
	version string
	started time.Time
	status  atomic.Pointer[statusSlot]
	router  *httprouter.Router

	// hub and heartbeat serve watches; see watch.go.
	hub       *Hub
	heartbeat time.Duration
}

func newResourceAPI(store *Store, hub *Hub, heartbeat time.Duration, log *slog.Logger, origin Origin, version string) *resourceAPI {
	a := &resourceAPI{store: store, hub: hub, heartbeat: heartbeat, log: log, origin: origin, version: version, started: time.Now()}
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
	w.Header().Set("Allow", "GET, HEAD")
	switch r.Method {
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
		api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: %s", r.Method, r.URL.Path, a.origin.readOnlyMessage()))
	default:
		api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: the API is read-only; use GET", r.Method, r.URL.Path))
	}
}

func (a *resourceAPI) notFound(w http.ResponseWriter, r *http.Request) {
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
// as itself, another error as a logged 500, and otherwise body.
func (a *resourceAPI) writeResult(w http.ResponseWriter, r *http.Request, body any, err error) {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		api.WriteError(w, ae)
	case err != nil:
		a.internal(w, r, err)
	default:
		api.WriteJSON(w, http.StatusOK, body)
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
	// prefix keeps only keys that start with it.
	prefix string
	// tenant keeps only objects whose tenant label (or, without one,
	// spec.tenant) names it.
	tenant string
	// newestFirst orders by metadata.createdAt, newest first, then by
	// name; otherwise the order is by name (store key).
	newestFirst bool
}

// listMeta is the only part of a stored object a list decodes, and it
// decodes it only when a filter or the order needs it.
type listMeta struct {
	Labels    map[string]string
	CreatedAt time.Time
}

// decodeListMeta decodes metadata.labels of the stored object obj, and
// metadata.createdAt when created is true; nothing else.
func decodeListMeta(obj []byte, created bool) (listMeta, error) {
	var m listMeta
	start, end, err := metadataRange(obj)
	if err != nil || start < 0 {
		return m, err
	}
	meta := obj[start:end]
	err = eachMember(meta, func(mb member) bool {
		switch {
		case mb.is("labels"):
			err = json.Unmarshal(meta[mb.value:mb.end], &m.Labels)
		case created && mb.is("createdAt"):
			err = json.Unmarshal(meta[mb.value:mb.end], &m.CreatedAt)
		}
		if err != nil {
			err = fmt.Errorf("metadata.%s: %w", mb.key[1:len(mb.key)-1], err)
		}
		return err == nil
	})
	return m, err
}

// tenantOf returns the tenant an object belongs to: its tenant label or,
// without one, its spec.tenant.
func tenantOf(obj []byte, m *listMeta) (string, error) {
	if t, ok := m.Labels[schema.LabelTenant]; ok {
		return t, nil
	}
	var o struct {
		Spec struct {
			Tenant string `json:"tenant"`
		} `json:"spec"`
	}
	err := json.Unmarshal(obj, &o)
	return o.Spec.Tenant, err
}

// hit is a matching stored value; value points into the transaction's
// memory and is valid only inside it.
type hit struct {
	value   []byte
	created time.Time
}

// list answers a list request from one read transaction. Only the objects
// of the requested page are copied out and given their resourceVersion.
func list(tx *Tx, spec listSpec, q listQuery) (api.List[json.RawMessage], error) {
	out := api.List[json.RawMessage]{Items: []json.RawMessage{}}
	b := resourceBucket(tx, spec.kind)
	if b == nil {
		return out, nil
	}
	decode := len(q.sel) > 0 || spec.tenant != "" || spec.newestFirst
	prefix := []byte(spec.prefix)
	var hits []hit
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if v == nil {
			continue
		}
		if len(v) < 8 {
			return out, fmt.Errorf("%s %q: stored value of %d bytes is too short", spec.kind, k, len(v))
		}
		h := hit{value: v}
		if decode {
			m, err := decodeListMeta(v[8:], spec.newestFirst)
			if err != nil {
				return out, fmt.Errorf("%s %q: %w", spec.kind, k, err)
			}
			if spec.tenant != "" {
				t, err := tenantOf(v[8:], &m)
				if err != nil {
					return out, fmt.Errorf("%s %q: %w", spec.kind, k, err)
				}
				if t != spec.tenant {
					continue
				}
			}
			if !q.sel.Matches(m.Labels) {
				continue
			}
			h.created = m.CreatedAt
		}
		hits = append(hits, h)
	}
	if spec.newestFirst {
		// The cursor gave name order; a stable sort keeps it among equals.
		slices.SortStableFunc(hits, func(x, y hit) int { return y.created.Compare(x.created) })
	}
	out.Total = len(hits)
	start := min(q.offset, len(hits))
	end := min(start+q.limit, len(hits))
	for _, h := range hits[start:end] {
		obj, err := servedObject(h.value[8:], binary.BigEndian.Uint64(h.value))
		if err != nil {
			return out, fmt.Errorf("%s: %w", spec.kind, err)
		}
		out.Items = append(out.Items, obj)
	}
	return out, nil
}

// resourceBucket returns the bucket of kind, or nil when none was stored.
func resourceBucket(tx *Tx, kind string) *bolt.Bucket {
	return tx.tx.Bucket(bucketResources).Bucket([]byte(kind))
}

// getServed returns the stored object kind/key as served, or nil when it
// does not exist.
func getServed(tx *Tx, kind, key string) (json.RawMessage, error) {
	b := resourceBucket(tx, kind)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	if len(v) < 8 {
		return nil, fmt.Errorf("%s %q: stored value of %d bytes is too short", kind, key, len(v))
	}
	obj, err := servedObject(v[8:], binary.BigEndian.Uint64(v))
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", kind, key, err)
	}
	return obj, nil
}

// kindNames are the words error messages use for each kind.
var kindNames = map[string]string{
	schema.KindTenant:      "tenant",
	schema.KindNodeGroup:   "node group",
	schema.KindConfigPatch: "config patch",
	schema.KindMachine:     "machine",
	schema.KindProvider:    "provider",
	schema.KindCommit:      "commit",
}

func notFound(kind, name string) *api.Error {
	return api.Errorf(http.StatusNotFound, "%s %q not found", kindNames[kind], name)
}

// needTenant returns a 404 naming the tenant unless it exists.
func needTenant(tx *Tx, tenant string) error {
	b := resourceBucket(tx, schema.KindTenant)
	if b == nil || b.Get([]byte(tenant)) == nil {
		return api.Errorf(http.StatusNotFound, "tenant %q not found; GET %stenants lists the tenants", tenant, APIPrefix)
	}
	return nil
}

// serveList parses the list query and answers with list(spec) unless check
// (when given) fails first in the same transaction. With ?watch=true it
// serves a watch of the list's scope instead, without check.
func (a *resourceAPI) serveList(w http.ResponseWriter, r *http.Request, spec listSpec, check func(*Tx) error) {
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
	err = a.store.View(func(tx *Tx) error {
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
	err := a.store.View(func(tx *Tx) (err error) {
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
		err := a.store.View(func(tx *Tx) (err error) {
			if obj, err = getServed(tx, kind, name); err == nil && obj == nil {
				err = notFound(kind, name)
			}
			return err
		})
		a.writeResult(w, r, obj, err)
	}
}

// listScoped lists the objects of a tenant-scoped kind keyed TENANT/NAME.
func (a *resourceAPI) listScoped(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant := p.ByName("tenant")
		a.serveList(w, r, listSpec{kind: kind, prefix: tenant + "/"}, func(tx *Tx) error {
			return needTenant(tx, tenant)
		})
	}
}

// getScoped serves one object of a tenant-scoped kind keyed TENANT/NAME.
func (a *resourceAPI) getScoped(kind string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant, name := p.ByName("tenant"), p.ByName("name")
		var obj json.RawMessage
		err := a.store.View(func(tx *Tx) (err error) {
			if err := needTenant(tx, tenant); err != nil {
				return err
			}
			if obj, err = getServed(tx, kind, tenant+"/"+name); err == nil && obj == nil {
				err = api.Errorf(http.StatusNotFound, "%s %q not found in tenant %q", kindNames[kind], name, tenant)
			}
			return err
		})
		a.writeResult(w, r, obj, err)
	}
}

func (a *resourceAPI) listTenantMachines(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant := p.ByName("tenant")
	a.serveList(w, r, listSpec{kind: schema.KindMachine, tenant: tenant}, func(tx *Tx) error {
		return needTenant(tx, tenant)
	})
}

func (a *resourceAPI) getTenantMachine(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant, name := p.ByName("tenant"), p.ByName("name")
	var obj json.RawMessage
	err := a.store.View(func(tx *Tx) (err error) {
		if err := needTenant(tx, tenant); err != nil {
			return err
		}
		obj, err = getServed(tx, schema.KindMachine, name)
		if err != nil {
			return err
		}
		if obj != nil {
			m, err := decodeListMeta(obj, false)
			if err != nil {
				return fmt.Errorf("machine %q: %w", name, err)
			}
			if t, err := tenantOf(obj, &m); err != nil {
				return fmt.Errorf("machine %q: %w", name, err)
			} else if t != tenant {
				obj = nil
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
	key := strings.ReplaceAll(rev, ":", "-")
	var obj json.RawMessage
	err := a.store.View(func(tx *Tx) (err error) {
		if obj, err = getServed(tx, schema.KindCommit, key); err != nil || obj != nil {
			return err
		}
		if len(key) < commitPrefixMin {
			return api.Errorf(http.StatusNotFound, "commit %q not found; give the full revision or a unique prefix of at least %d characters", rev, commitPrefixMin)
		}
		matches := commitsWithPrefix(tx, key)
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
func commitsWithPrefix(tx *Tx, prefix string) []string {
	b := resourceBucket(tx, schema.KindCommit)
	if b == nil {
		return nil
	}
	prefixes := []string{prefix}
	if !strings.HasPrefix(prefix, "sha256-") {
		prefixes = append(prefixes, "sha256-"+prefix)
	}
	var names []string
	for _, p := range prefixes {
		c := b.Cursor()
		for k, v := c.Seek([]byte(p)); k != nil && bytes.HasPrefix(k, []byte(p)); k, v = c.Next() {
			if v != nil {
				names = append(names, string(k))
			}
		}
	}
	return names
}

// servedObject returns a copy of the stored object obj with
// metadata.resourceVersion set to rv as a decimal string, placed after
// metadata.uid (or name) as the Go types order it. Everything else keeps
// its stored bytes and order; only the metadata object is rewritten.
func servedObject(obj []byte, rv uint64) (json.RawMessage, error) {
	rvMember := `"resourceVersion":"` + strconv.FormatUint(rv, 10) + `"`
	start, end, err := metadataRange(obj)
	if err != nil {
		return nil, err
	}
	if start >= 0 {
		meta, err := withMember(obj[start:end], "resourceVersion", rvMember, "uid", "name")
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		out := make([]byte, 0, len(obj)+len(rvMember)+1)
		out = append(out, obj[:start]...)
		out = append(out, meta...)
		return append(out, obj[end:]...), nil
	}
	// No metadata: add it as the object's last member.
	body := bytes.TrimRight(obj, " \t\r\n")
	out := bytes.Clone(body[:len(body)-1])
	if !bytes.HasSuffix(bytes.TrimRight(out, " \t\r\n"), []byte("{")) {
		out = append(out, ',')
	}
	out = append(out, `"metadata":{`+rvMember+`}}`...)
	return out, nil
}

// metadataRange returns where the value of the top-level member
// "metadata" of the JSON object obj starts and ends, or -1, -1 when obj
// has none. It reads obj only up to the end of that value.
func metadataRange(obj []byte) (start, end int, err error) {
	start, end = -1, -1
	err = eachMember(obj, func(m member) bool {
		if m.is("metadata") {
			start, end = m.value, m.end
			return false
		}
		return true
	})
	if err == nil && start >= 0 && obj[start] != '{' {
		err = errors.New("decode object: metadata is not an object")
	}
	return start, end, err
}

// withMember returns the JSON object obj with the member key replaced by
// text (`"key":value`), placed after the first of after that obj has, or
// first when it has none of them. The other members keep their bytes and
// order.
func withMember(obj []byte, key, text string, after ...string) ([]byte, error) {
	var members []member
	err := eachMember(obj, func(m member) bool {
		if !m.is(key) {
			members = append(members, m)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	at := 0
	for _, a := range after {
		if i := slices.IndexFunc(members, func(m member) bool { return m.is(a) }); i >= 0 {
			at = i + 1
			break
		}
	}
	out := make([]byte, 0, len(obj)+len(text)+1)
	out = append(out, '{')
	for i := 0; i <= len(members); i++ {
		if i == at {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, text...)
		}
		if i == len(members) {
			break
		}
		if i > 0 || at == 0 {
			out = append(out, ',')
		}
		out = append(out, obj[members[i].start:members[i].end]...)
	}
	return append(out, '}'), nil
}

// The functions below walk the members of a stored JSON object without
// decoding it, so that a list reads only the metadata of each object. They
// check the structure they walk (quotes, colons, commas, brackets) but not
// the contents of numbers and literals: encoding/json validates whatever
// is decoded or served.

var errJSONEnd = errors.New("decode object: unexpected end of JSON")

// member is one member of a JSON object: obj[start:end] is `"key":value`,
// obj[value:end] the value.
type member struct {
	key               []byte // with its quotes, as stored
	start, value, end int
}

// is reports whether the member's key is name.
func (m member) is(name string) bool {
	k := m.key[1 : len(m.key)-1]
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k) == name
	}
	var s string
	return json.Unmarshal(m.key, &s) == nil && s == name
}

// eachMember calls fn for each member of the JSON object obj, in order,
// until fn returns false.
func eachMember(obj []byte, fn func(member) bool) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errors.New("decode object: not a JSON object")
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return checkEnd(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return fmt.Errorf("decode object: want a key at offset %d", i)
		}
		m := member{start: i}
		j, err := skipString(obj, i)
		if err != nil {
			return err
		}
		m.key = obj[i:j]
		j = skipSpace(obj, j)
		if j >= len(obj) || obj[j] != ':' {
			return fmt.Errorf("decode object: want ':' at offset %d", j)
		}
		m.value = skipSpace(obj, j+1)
		if m.end, err = skipValue(obj, m.value); err != nil {
			return err
		}
		if !fn(m) {
			return nil
		}
		i = skipSpace(obj, m.end)
		if i >= len(obj) {
			return errJSONEnd
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return checkEnd(obj, i+1)
		default:
			return fmt.Errorf("decode object: want ',' or '}' at offset %d", i)
		}
	}
}

// checkEnd reports an error unless only white space follows offset i.
func checkEnd(b []byte, i int) error {
	if i = skipSpace(b, i); i < len(b) {
		return fmt.Errorf("decode object: data after the closing brace at offset %d", i)
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset past the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errJSONEnd
}

// skipValue returns the offset past the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errJSONEnd
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		var stack []byte
		for i < len(b) {
			switch c := b[i]; c {
			case '"':
				j, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = j
				continue
			case '{', '[':
				stack = append(stack, c+2) // '}' and ']' follow '{' and '[' by two
			case '}', ']':
				if len(stack) == 0 || stack[len(stack)-1] != c {
					return 0, fmt.Errorf("decode object: unexpected %q at offset %d", c, i)
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errJSONEnd
	case ',', ':', '}', ']':
		return 0, fmt.Errorf("decode object: want a value at offset %d", i)
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",:{}[]\" \t\r\n", rune(b[j])) {
		j++
	}
	return j, nil
}
