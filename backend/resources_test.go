package backend

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// Revisions of the seeded commits. The first two share their first 8
// characters; the third is a directory source's content hash.
const (
	revOld   = "0123456789abcdef0123456789abcdef01234567"
	revMid   = "01234567ffffffff0123456789abcdef01234567"
	revNew   = "89abcdef0123456789abcdef0123456789abcdef"
	revDir   = "sha256:feedbeef00112233445566778899aabbccddeeff00112233445566778899aa"
	keyDir   = "sha256-feedbeef00112233445566778899aabbccddeeff00112233445566778899aa"
	revTwin  = "89abcdef9999999999999999999999999999999a" // created at the same time as revNew
	applied  = "AppliedTenant"
	noTenant = "gamma"
)

// seeded is what seedResources stored: each object by "Kind/key", and the
// resourceVersion the store gave it.
type seeded struct {
	objects map[string]any
	rvs     map[string]uint64
}

// seedResources stores a realistic set of resources: tenants alpha and
// beta, their node groups, patches and machines, four commits, the sim
// provider, and an internal record.
func seedResources(t testing.TB, s store.Store) *seeded {
	t.Helper()
	sd := &seeded{objects: map[string]any{}, rvs: map[string]uint64{}}
	type entry struct {
		kind, key string
		obj       any
	}
	entries := []entry{
		{schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1)},
		{schema.KindTenant, "beta", storetest.Tenant("beta", "dev", 2)},
		{schema.KindNodeGroup, "alpha/cp", storetest.NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 3)},
		{schema.KindNodeGroup, "alpha/workers", storetest.NodeGroup("alpha", "workers", schema.RoleWorker, 2, 4)},
		{schema.KindNodeGroup, "beta/cp", storetest.NodeGroup("beta", "cp", schema.RoleControlPlane, 1, 5)},
		{schema.KindConfigPatch, "alpha/ntp", storetest.Patch("alpha", "ntp", 6)},
		{schema.KindConfigPatch, "beta/ntp", storetest.Patch("beta", "ntp", 7)},
		{schema.KindMachine, "sim-a0", storetest.Machine("sim-a0", "alpha", "cp", schema.RoleControlPlane, "small", 8)},
		{schema.KindMachine, "sim-a1", storetest.Machine("sim-a1", "alpha", "workers", schema.RoleWorker, "large", 9)},
		{schema.KindMachine, "sim-a2", storetest.Machine("sim-a2", "alpha", "workers", schema.RoleWorker, "medium", 10)},
		{schema.KindMachine, "sim-b0", storetest.Machine("sim-b0", "beta", "cp", schema.RoleControlPlane, "small", 11)},
		{schema.KindCommit, revOld, storetest.Commit(revOld, storetest.SeedTime.Add(1*time.Hour), schema.CommitSucceeded)},
		{schema.KindCommit, revMid, storetest.Commit(revMid, storetest.SeedTime.Add(2*time.Hour), schema.CommitFailed)},
		{schema.KindCommit, keyDir, storetest.Commit(revDir, storetest.SeedTime.Add(3*time.Hour), schema.CommitInvalid)},
		{schema.KindCommit, revNew, storetest.Commit(revNew, storetest.SeedTime.Add(4*time.Hour), schema.CommitSucceeded)},
		{schema.KindCommit, revTwin, storetest.Commit(revTwin, storetest.SeedTime.Add(4*time.Hour), schema.CommitSucceeded)},
		{schema.KindProvider, "sim", &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider,
			Metadata: storetest.Meta("sim", 12, nil),
			Spec: schema.ProviderSpec{Class: "sim", Source: "registry.opentofu.org/rezuscloud/rezussim", Builtin: true,
				Mappings: []schema.TypeMapping{{TFType: "rezussim_machine", Kind: schema.KindMachine}}},
			Status: schema.ProviderStatus{Available: true}}},
		// Internal records share names with served ones and must never show.
		{applied, "alpha", map[string]any{"tenant": "alpha", "revision": revNew, "metadata": map[string]any{"name": "alpha"}}},
		{applied, noTenant, map[string]any{"tenant": noTenant, "metadata": map[string]any{"name": noTenant}}},
	}
	err := s.Update(func(tx store.Tx) error {
		for _, e := range entries {
			rv, err := txPut(tx, e.kind, e.key, e.obj)
			if err != nil {
				return err
			}
			sd.objects[e.kind+"/"+e.key] = e.obj
			sd.rvs[e.kind+"/"+e.key] = rv
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sd
}

// txPut stores obj as the reconciler does: an API object with PutObject,
// anything else as JSON with Put. It returns the object's resourceVersion.
func txPut(tx store.Tx, kind, key string, obj any) (uint64, error) {
	if o, ok := obj.(schema.Object); ok && servedKind(kind) {
		if _, err := tx.PutObject(kind, key, o); err != nil {
			return 0, err
		}
		return strconv.ParseUint(o.Meta().ResourceVersion, 10, 64)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return 0, err
	}
	return tx.Put(kind, key, b)
}

// served returns the bytes the API must serve for a seeded object: its
// JSON as the Go types encode it, with metadata.resourceVersion set.
func (sd *seeded) served(t *testing.T, kind, key string) string {
	t.Helper()
	obj, ok := sd.objects[kind+"/"+key]
	if !ok {
		t.Fatalf("nothing seeded as %s/%s", kind, key)
	}
	rv := fmt.Sprint(sd.rvs[kind+"/"+key])
	switch o := obj.(type) {
	case *schema.Tenant:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	case *schema.NodeGroup:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	case *schema.ConfigPatch:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	case *schema.Machine:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	case *schema.Commit:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	case *schema.Provider:
		c := *o
		c.Metadata.ResourceVersion = rv
		return mustMarshal(t, &c)
	}
	t.Fatalf("%s/%s is not a served kind", kind, key)
	return ""
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rawList is a list answer with its items left as JSON.
type rawList struct {
	Items []json.RawMessage `json:"items"`
	Total int               `json:"total"`
}

// getList GETs path and decodes the list answer.
func getList(t *testing.T, ts *testServer, path string) rawList {
	t.Helper()
	code, body := ts.do(t, req{method: "GET", path: path})
	wantCode(t, "GET "+path, code, body, http.StatusOK)
	var l rawList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	if l.Items == nil {
		t.Fatalf("GET %s: items is not an array: %s", path, body)
	}
	return l
}

// names returns metadata.name of each item.
func names(t *testing.T, l rawList) []string {
	t.Helper()
	out := []string{}
	for _, it := range l.Items {
		var o struct {
			Metadata schema.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(it, &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Metadata.Name)
	}
	return out
}

func TestResourcesGet(t *testing.T) {
	ts := startServer(t, Config{}, false)
	sd := seedResources(t, ts.Store())
	for _, tc := range []struct {
		path      string
		kind, key string
	}{
		{"/api/v1/tenants/alpha", schema.KindTenant, "alpha"},
		{"/api/v1/tenants/beta", schema.KindTenant, "beta"},
		{"/api/v1/tenants/alpha/node-groups/workers", schema.KindNodeGroup, "alpha/workers"},
		{"/api/v1/tenants/beta/node-groups/cp", schema.KindNodeGroup, "beta/cp"},
		{"/api/v1/tenants/alpha/patches/ntp", schema.KindConfigPatch, "alpha/ntp"},
		{"/api/v1/tenants/beta/patches/ntp", schema.KindConfigPatch, "beta/ntp"},
		{"/api/v1/tenants/alpha/machines/sim-a1", schema.KindMachine, "sim-a1"},
		{"/api/v1/machines/sim-b0", schema.KindMachine, "sim-b0"},
		{"/api/v1/providers/sim", schema.KindProvider, "sim"},
		{"/api/v1/commits/" + revOld, schema.KindCommit, revOld},
		{"/api/v1/commits/" + keyDir, schema.KindCommit, keyDir},
		{"/api/v1/commits/" + url.PathEscape(revDir), schema.KindCommit, keyDir},
	} {
		code, body := ts.do(t, req{method: "GET", path: tc.path})
		wantCode(t, tc.path, code, body, http.StatusOK)
		// Byte for byte: the stored JSON with only resourceVersion added,
		// where the Go types put it.
		if got, want := strings.TrimSuffix(string(body), "\n"), sd.served(t, tc.kind, tc.key); got != want {
			t.Errorf("GET %s:\n got %s\nwant %s", tc.path, got, want)
		}
	}

	// The resourceVersion is the store's, and follows changes.
	var rv uint64
	err := ts.Store().Update(func(tx store.Tx) (err error) {
		rv, err = txPut(tx, schema.KindTenant, "beta", storetest.Tenant("beta", "staging", 2))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/beta"})
	wantCode(t, "GET beta after change", code, body, http.StatusOK)
	var tn schema.Tenant
	if err := json.Unmarshal(body, &tn); err != nil {
		t.Fatal(err)
	}
	if tn.Metadata.ResourceVersion != fmt.Sprint(rv) || tn.Metadata.Labels["env"] != "staging" {
		t.Errorf("after change: resourceVersion %q labels %v, want %d and env=staging", tn.Metadata.ResourceVersion, tn.Metadata.Labels, rv)
	}
	if rv <= sd.rvs[schema.KindTenant+"/beta"] {
		t.Errorf("new resourceVersion %d is not above the old %d", rv, sd.rvs[schema.KindTenant+"/beta"])
	}

	// HEAD answers like GET, without a body.
	resp := ts.doResp(t, req{method: "HEAD", path: "/api/v1/tenants/alpha"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: %d %q, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestResourcesLists(t *testing.T) {
	ts := startServer(t, Config{}, false)
	sd := seedResources(t, ts.Store())
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/api/v1/tenants", []string{"alpha", "beta"}},
		{"/api/v1/tenants/alpha/node-groups", []string{"cp", "workers"}},
		{"/api/v1/tenants/beta/node-groups", []string{"cp"}},
		{"/api/v1/tenants/alpha/patches", []string{"ntp"}},
		{"/api/v1/tenants/alpha/machines", []string{"sim-a0", "sim-a1", "sim-a2"}},
		{"/api/v1/tenants/beta/machines", []string{"sim-b0"}},
		{"/api/v1/machines", []string{"sim-a0", "sim-a1", "sim-a2", "sim-b0"}},
		{"/api/v1/providers", []string{"sim"}},
		// Newest first; revNew and revTwin share createdAt, so by name.
		{"/api/v1/commits", []string{revNew, revTwin, keyDir, revMid, revOld}},
		// Unknown parameters are ignored.
		{"/api/v1/machines?pretty=true&resourceVersion=3", []string{"sim-a0", "sim-a1", "sim-a2", "sim-b0"}},
	} {
		l := getList(t, ts, tc.path)
		if diff := cmp.Diff(tc.want, names(t, l)); diff != "" {
			t.Errorf("GET %s names (-want +got):\n%s", tc.path, diff)
		}
		if l.Total != len(tc.want) {
			t.Errorf("GET %s: total %d, want %d", tc.path, l.Total, len(tc.want))
		}
	}

	// List items are served exactly as single gets are.
	l := getList(t, ts, "/api/v1/tenants/beta/patches")
	if len(l.Items) != 1 || string(l.Items[0]) != sd.served(t, schema.KindConfigPatch, "beta/ntp") {
		t.Errorf("patches of beta = %s, want [%s]", l.Items, sd.served(t, schema.KindConfigPatch, "beta/ntp"))
	}

	// Tenant scoping: no object of one tenant reaches another's list.
	for _, tenant := range []string{"alpha", "beta"} {
		for _, sub := range []string{"node-groups", "patches", "machines"} {
			for _, it := range getList(t, ts, "/api/v1/tenants/"+tenant+"/"+sub).Items {
				var o struct {
					Metadata schema.ObjectMeta `json:"metadata"`
				}
				json.Unmarshal(it, &o)
				if got := o.Metadata.Labels[schema.LabelTenant]; got != tenant {
					t.Errorf("%s of tenant %s lists %s of tenant %q", sub, tenant, o.Metadata.Name, got)
				}
			}
		}
	}
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/beta/machines/sim-a1"})
	wantCode(t, "machine of another tenant", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, `machine "sim-a1"`, `tenant "beta"`)
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tenants/beta/node-groups/workers"})
	wantCode(t, "node group of another tenant", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, `node group "workers"`, `tenant "beta"`)
}

func TestResourcesLabelSelector(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	for _, tc := range []struct {
		path, selector string
		want           []string
	}{
		{"/api/v1/machines", "rezuscloud.io/role=worker", []string{"sim-a1", "sim-a2"}},
		{"/api/v1/machines", "rezuscloud.io/role==controlplane", []string{"sim-a0", "sim-b0"}},
		{"/api/v1/machines", "shape!=small", []string{"sim-a1", "sim-a2"}},
		{"/api/v1/machines", "shape in (large, medium)", []string{"sim-a1", "sim-a2"}},
		{"/api/v1/machines", "shape notin (large,medium)", []string{"sim-a0", "sim-b0"}},
		{"/api/v1/machines", "rezuscloud.io/tenant=alpha,shape!=medium", []string{"sim-a0", "sim-a1"}},
		{"/api/v1/machines", "shape", []string{"sim-a0", "sim-a1", "sim-a2", "sim-b0"}},
		{"/api/v1/machines", "!shape", []string{}},
		{"/api/v1/machines", "rezuscloud.io/provider=oci", []string{}},
		{"/api/v1/tenants/alpha/machines", "rezuscloud.io/node-group=workers", []string{"sim-a1", "sim-a2"}},
		{"/api/v1/tenants/beta/machines", "rezuscloud.io/role=worker", []string{}},
		{"/api/v1/tenants", "env=prod", []string{"alpha"}},
		{"/api/v1/tenants", "env", []string{"alpha", "beta"}},
		{"/api/v1/tenants", "!env", []string{}},
		{"/api/v1/tenants/alpha/node-groups", "rezuscloud.io/role!=worker", []string{"cp"}},
		{"/api/v1/providers", "!env", []string{"sim"}},
		{"/api/v1/commits", "!env", []string{revNew, revTwin, keyDir, revMid, revOld}},
		{"/api/v1/commits", "env", []string{}},
	} {
		path := tc.path + "?labelSelector=" + url.QueryEscape(tc.selector)
		l := getList(t, ts, path)
		if diff := cmp.Diff(tc.want, names(t, l)); diff != "" {
			t.Errorf("%s %q (-want +got):\n%s", tc.path, tc.selector, diff)
		}
		if l.Total != len(tc.want) {
			t.Errorf("%s %q: total %d, want %d", tc.path, tc.selector, l.Total, len(tc.want))
		}
	}
}

func TestResourcesPaging(t *testing.T) {
	ts := startServer(t, Config{}, false)
	err := ts.Store().Update(func(tx store.Tx) error {
		for i := range 250 {
			id := fmt.Sprintf("sim-%03d", i)
			role := schema.RoleWorker
			if i%10 == 0 {
				role = schema.RoleControlPlane
			}
			if _, err := tx.PutObject(schema.KindMachine, id, storetest.Machine(id, "alpha", "ng", role, "small", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(from, to int) []string {
		out := []string{}
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("sim-%03d", i))
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []string
		total int
	}{
		{"", ids(0, DefaultListLimit), 250},
		{"?limit=10", ids(0, 10), 250},
		{"?offset=245", ids(245, 250), 250},
		{"?offset=100&limit=50", ids(100, 150), 250},
		{"?offset=250", []string{}, 250},
		{"?offset=9999&limit=1", []string{}, 250},
		{"?limit=1000", ids(0, 250), 250},
		{"?offset=0&limit=1", ids(0, 1), 250},
		{"?labelSelector=rezuscloud.io/role%3Dcontrolplane&offset=3&limit=2", []string{"sim-030", "sim-040"}, 25},
		{"?labelSelector=rezuscloud.io/role%3Dcontrolplane&offset=24", []string{"sim-240"}, 25},
	} {
		l := getList(t, ts, "/api/v1/machines"+tc.query)
		if diff := cmp.Diff(tc.want, names(t, l)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.query, diff)
		}
		if l.Total != tc.total {
			t.Errorf("%q: total %d, want %d", tc.query, l.Total, tc.total)
		}
	}
}

func TestResourcesBadQuery(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	for _, tc := range []struct {
		query   string
		mention []string
	}{
		{"limit=0", []string{`limit "0"`, "1 to 1000"}},
		{"limit=-5", []string{`limit "-5"`}},
		{"limit=1001", []string{`limit "1001"`, "1 to 1000"}},
		{"limit=ten", []string{`limit "ten"`}},
		{"limit=", []string{`limit ""`}},
		{"offset=-1", []string{`offset "-1"`, "0 or more"}},
		{"offset=1.5", []string{`offset "1.5"`}},
		{"labelSelector=" + url.QueryEscape("role in a,b"), []string{"labelSelector", "role in a"}},
		{"labelSelector=" + url.QueryEscape("Bad Key=x"), []string{"labelSelector", "Bad Key"}},
		{"labelSelector=" + url.QueryEscape("env=a b"), []string{"labelSelector", "a b"}},
		{"labelSelector=" + url.QueryEscape("env=x,,y"), []string{"labelSelector", "empty requirement"}},
	} {
		for _, path := range []string{"/api/v1/tenants", "/api/v1/tenants/alpha/machines", "/api/v1/commits"} {
			code, body := ts.do(t, req{method: "GET", path: path + "?" + tc.query})
			wantCode(t, path+"?"+tc.query, code, body, http.StatusBadRequest)
			wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, tc.mention...)
		}
	}
}

func TestResourcesNotFound(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	for _, tc := range []struct {
		path    string
		mention []string
	}{
		{"/api/v1/tenants/nope", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/node-groups", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/node-groups/cp", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/patches", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/patches/ntp", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/machines", []string{`tenant "nope"`}},
		{"/api/v1/tenants/nope/machines/sim-a0", []string{`tenant "nope"`}},
		{"/api/v1/tenants/alpha/node-groups/nope", []string{`node group "nope"`, `tenant "alpha"`}},
		{"/api/v1/tenants/alpha/patches/nope", []string{`config patch "nope"`, `tenant "alpha"`}},
		{"/api/v1/tenants/alpha/machines/nope", []string{`machine "nope"`, `tenant "alpha"`}},
		{"/api/v1/machines/nope", []string{`machine "nope"`}},
		{"/api/v1/providers/oci", []string{`provider "oci"`}},
		{"/api/v1/commits/deadbeefdeadbeef", []string{`commit "deadbeefdeadbeef"`}},
		{"/api/v1/nothing", []string{"/api/v1/nothing"}},
		{"/api/v1/tenants/alpha/secrets", []string{"/api/v1/tenants/alpha/secrets"}},
		// Internal records are not served, whatever they are named.
		{"/api/v1/tenants/" + noTenant, []string{`tenant "gamma"`}},
		{"/api/v1/appliedtenants", nil},
		{"/api/v1/appliedtenants/alpha", nil},
		{"/api/v1/AppliedTenant/alpha", nil},
	} {
		code, body := ts.do(t, req{method: "GET", path: tc.path})
		wantCode(t, tc.path, code, body, http.StatusNotFound)
		wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, tc.mention...)
	}
	// The internal record of alpha changed nothing in what is served.
	for _, path := range []string{"/api/v1/tenants", "/api/v1/tenants/alpha", "/api/v1/status"} {
		code, body := ts.do(t, req{method: "GET", path: path})
		wantCode(t, path, code, body, http.StatusOK)
		if strings.Contains(string(body), `"revision"`) || strings.Contains(string(body), noTenant) {
			t.Errorf("GET %s shows an internal record: %s", path, body)
		}
	}
}

func TestResourcesCommitLookup(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	sha := func(path string) (int, string, []byte) {
		code, body := ts.do(t, req{method: "GET", path: "/api/v1/commits/" + path})
		var c schema.Commit
		json.Unmarshal(body, &c)
		return code, c.Spec.SHA, body
	}
	for _, tc := range []struct {
		path, want string
	}{
		{revOld, revOld},
		{revOld[:12], revOld},
		{"01234567f", revMid},
		{revNew[:len(revNew)-1], revNew},
		{"89abcdef0", revNew},
		{"sha256:feedbee", revDir},
		{"sha256-feedbeef", revDir},
		{"feedbee", revDir},
		{"feedbeef0011", revDir},
	} {
		code, got, body := sha(tc.path)
		wantCode(t, tc.path, code, body, http.StatusOK)
		if got != tc.want {
			t.Errorf("GET commits/%s = %s, want %s", tc.path, got, tc.want)
		}
	}
	// Ambiguous prefixes are 400 and name the candidates.
	code, _, body := sha("01234567")
	wantCode(t, "ambiguous", code, body, http.StatusBadRequest)
	wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, `"01234567" is ambiguous`, revOld, revMid)
	code, _, body = sha("89abcdef")
	wantCode(t, "ambiguous", code, body, http.StatusBadRequest)
	wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, revNew, revTwin)
	// Too short, or matching nothing, is 404.
	code, _, body = sha("012345")
	wantCode(t, "short prefix", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, `commit "012345"`, "at least 7")
	code, _, body = sha("fffffff")
	wantCode(t, "no match", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, `commit "fffffff"`)
}

func TestResourcesReadOnly(t *testing.T) {
	origins := []struct {
		origin  Origin
		mention []string
	}{
		{Origin{Repo: "https://git.example/infra.git", Ref: "refs/heads/main", Path: "clusters/"},
			[]string{"read-only", "https://git.example/infra.git", "ref refs/heads/main", "path clusters/", "push"}},
		{Origin{Repo: "/srv/manifests"}, []string{"read-only", "/srv/manifests"}},
		{Origin{}, []string{"read-only", "git repository", "push"}},
	}
	for _, o := range origins {
		ts := startServer(t, Config{Origin: o.origin}, false)
		seedResources(t, ts.Store())
		var before []byte
		ts.Store().View(func(tx store.Tx) error {
			r, err := tx.Get(schema.KindTenant, "alpha")
			before = r.Object
			return err
		})
		for _, path := range []string{
			"/api/v1/tenants", "/api/v1/tenants/alpha", "/api/v1/tenants/alpha/node-groups/cp",
			"/api/v1/tenants/alpha/patches", "/api/v1/tenants/alpha/machines/sim-a0",
			"/api/v1/machines/sim-a0", "/api/v1/providers/sim", "/api/v1/commits/" + revOld, "/api/v1/status",
		} {
			for _, method := range []string{"PUT", "POST", "PATCH", "DELETE"} {
				resp := ts.doResp(t, req{method: method, path: path, body: []byte(`{"spec":{}}`)})
				var e api.Error
				err := json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				if resp.StatusCode != http.StatusMethodNotAllowed || err != nil || e.Reason != api.ReasonMethodNotAllowed {
					t.Fatalf("%s %s: %d %+v (%v), want 405 MethodNotAllowed", method, path, resp.StatusCode, e, err)
				}
				if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("%s %s: Allow %q, want GET, HEAD", method, path, got)
				}
				for _, m := range append([]string{method + " " + path}, o.mention...) {
					if !strings.Contains(e.Message, m) {
						t.Errorf("%s %s with origin %+v: message %q does not mention %q", method, path, o.origin, e.Message, m)
					}
				}
			}
		}
		code, body := ts.do(t, req{method: "OPTIONS", path: "/api/v1/tenants"})
		wantCode(t, "OPTIONS", code, body, http.StatusMethodNotAllowed)
		wantAPIError(t, body, http.StatusMethodNotAllowed, api.ReasonMethodNotAllowed, "use GET")
		ts.Store().View(func(tx store.Tx) error {
			r, err := tx.Get(schema.KindTenant, "alpha")
			if string(r.Object) != string(before) {
				t.Errorf("a refused write changed the tenant")
			}
			return err
		})
	}
}

func TestResourcesAuth(t *testing.T) {
	ts := startServer(t, Config{}, true)
	seedResources(t, ts.Store())
	for _, tok := range []string{"viewer", "editor", "admin"} {
		for _, path := range []string{"/api/v1/tenants", "/api/v1/tenants/alpha/machines", "/api/v1/commits/" + revOld, "/api/v1/status"} {
			code, body := ts.do(t, req{method: "GET", path: path, token: tok})
			wantCode(t, tok+" "+path, code, body, http.StatusOK)
		}
	}
	for _, r := range []req{
		{method: "GET", path: "/api/v1/tenants"},
		{method: "GET", path: "/api/v1/tenants/alpha"},
		{method: "GET", path: "/api/v1/status"},
		{method: "GET", path: "/api/v1/nothing"},
		{method: "PUT", path: "/api/v1/tenants/alpha"},
		{method: "GET", path: "/api/v1/tenants", bearer: "not-a-token"},
	} {
		code, body := ts.do(t, r)
		wantCode(t, "unauthenticated "+r.method+" "+r.path, code, body, http.StatusUnauthorized)
		wantAPIError(t, body, http.StatusUnauthorized, api.ReasonUnauthorized)
		if strings.Contains(string(body), "alpha") && r.path != "/api/v1/tenants/alpha" {
			t.Errorf("401 leaks data: %s", body)
		}
	}
	// An ephemeral token with the view role reads as a bearer token.
	secret, revoke := ts.Tokens().Ephemeral("dashboard", RoleView)
	defer revoke()
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/machines?labelSelector=shape%3Dlarge", bearer: secret})
	wantCode(t, "bearer view token", code, body, http.StatusOK)
	if !strings.Contains(string(body), "sim-a1") {
		t.Errorf("bearer list = %s, want sim-a1", body)
	}
	// The state API behind the same prefix keeps its own routes and roles.
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/alpha", token: "viewer"})
	wantCode(t, "state as viewer", code, body, http.StatusForbidden)
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/alpha/versions", token: "viewer"})
	wantCode(t, "versions of no state", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, "alpha")
}

func getStatus(t *testing.T, ts *testServer) (api.Status, map[string]json.RawMessage) {
	t.Helper()
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/status"})
	wantCode(t, "status", code, body, http.StatusOK)
	var sb api.Status
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	json.Unmarshal(body, &members)
	return sb, members
}

func TestResourcesStatus(t *testing.T) {
	before := time.Now().Add(-time.Second)
	ts := startServer(t, Config{Version: "v1.2.3"}, false)
	sd := seedResources(t, ts.Store())

	sb, members := getStatus(t, ts)
	var maxRV uint64
	for _, rv := range sd.rvs {
		maxRV = max(maxRV, rv)
	}
	if diff := cmp.Diff(api.ResourceCounts{Tenants: 2, NodeGroups: 3, ConfigPatches: 2, Machines: 4, Commits: 5}, sb.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if sb.Server.Version != "v1.2.3" || sb.Server.ResourceVersion != fmt.Sprint(maxRV) {
		t.Errorf("server = %+v, want version v1.2.3 and resourceVersion %d", sb.Server, maxRV)
	}
	if sb.Server.StartedAt.Before(before.Truncate(time.Second)) || sb.Server.StartedAt.After(time.Now()) {
		t.Errorf("startedAt %v, want between %v and now", sb.Server.StartedAt, before)
	}
	if _, err := time.ParseDuration(sb.Server.Uptime); err != nil || sb.Server.UptimeSeconds < 0 {
		t.Errorf("uptime %q (%d s): %v", sb.Server.Uptime, sb.Server.UptimeSeconds, err)
	}
	if len(members) != 2 {
		t.Errorf("status without a status function has members %v, want server and counts", keys(members))
	}

	// The status function adds the source's and the reconciler's parts;
	// server and counts stay the server's.
	calls := 0
	ts.SetStatus(func(st *api.Status) {
		calls++
		st.Source = &api.SourceStatus{URL: "https://git.example/infra.git", Revision: revNew}
		st.Reconciler = &api.ReconcilerStatus{LastCommit: revNew, TofuRuns: 2}
		st.Counts.Tenants = 99
	})
	sb, members = getStatus(t, ts)
	if calls != 1 {
		t.Errorf("status function called %d times, want 1", calls)
	}
	if sb.Source == nil || sb.Source.Revision != revNew || sb.Reconciler == nil || sb.Reconciler.TofuRuns != 2 {
		t.Errorf("status function members: source %+v reconciler %+v", sb.Source, sb.Reconciler)
	}
	if sb.Counts.Tenants != 2 || sb.Server.Version != "v1.2.3" {
		t.Errorf("status function overrode server members: %+v %+v", sb.Server, sb.Counts)
	}
	if diff := cmp.Diff([]string{"counts", "reconciler", "server", "source"}, keys(members)); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}

	// A status function that panics is reported, not fatal.
	ts.SetStatus(func(st *api.Status) {
		st.Source = &api.SourceStatus{URL: "/srv/manifests"}
		panic("boom")
	})
	sb, _ = getStatus(t, ts)
	if !strings.Contains(sb.Error, "boom") || sb.Counts.Tenants != 2 || sb.Source != nil {
		t.Errorf("panicking status function: error %q counts %+v source %+v", sb.Error, sb.Counts, sb.Source)
	}

	// SetStatus(nil) removes the status function.
	ts.SetStatus(nil)
	if _, members = getStatus(t, ts); len(members) != 2 {
		t.Errorf("after SetStatus(nil): members %v", keys(members))
	}
}

// replicasOf is a ReplicaSource that reports a fixed status, or panics
// with its panic.
type replicasOf struct {
	st    *api.ReplicasStatus
	panic string
}

func (r replicasOf) ReplicasStatus() *api.ReplicasStatus {
	if r.panic != "" {
		panic(r.panic)
	}
	return r.st
}

// TestResourcesStatusReplicas: a server given a replica source reports
// the replicas in its status beside what the status function reports; a
// source that panics is reported, not fatal; without one there is no
// replicas member.
func TestResourcesStatusReplicas(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	since := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	want := &api.ReplicasStatus{Self: "rc-b", Leader: "rc-a", Shards: 64, Unowned: 1, Members: []api.ReplicaStatus{
		{Name: "rc-a", Address: "https://rc-a.example:8443", Since: since, Leader: true, Shards: 32, Tenants: 1},
		{Name: "rc-b", Address: "https://rc-b.example:8443", Since: since.Add(time.Minute), Shards: 31, Tenants: 1},
	}}
	ts.SetStatus(func(st *api.Status) {
		st.Source = &api.SourceStatus{URL: "/srv/manifests"}
		st.Replicas = &api.ReplicasStatus{Self: "from the status function"}
	})
	if sb, members := getStatus(t, ts); sb.Replicas != nil || members["replicas"] != nil {
		t.Errorf("without a replica source: replicas %s, want none (the status function's is overwritten)", members["replicas"])
	}

	ts.SetReplicas(replicasOf{st: want})
	sb, members := getStatus(t, ts)
	if diff := cmp.Diff(want, sb.Replicas); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"counts", "replicas", "server", "source"}, keys(members)); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}

	// The replicas stay when the status function fails, and a source that
	// panics is reported beside it.
	ts.SetStatus(func(*api.Status) { panic("boom") })
	if sb, _ = getStatus(t, ts); sb.Replicas == nil || sb.Replicas.Self != "rc-b" || !strings.Contains(sb.Error, "boom") {
		t.Errorf("panicking status function: replicas %+v error %q", sb.Replicas, sb.Error)
	}
	ts.SetReplicas(replicasOf{panic: "no lease"})
	sb, _ = getStatus(t, ts)
	if sb.Replicas != nil || sb.Error != "status function panicked: boom; replica source panicked: no lease" || sb.Counts.Tenants != 2 {
		t.Errorf("panicking replica source: replicas %+v error %q counts %+v", sb.Replicas, sb.Error, sb.Counts)
	}

	ts.SetStatus(nil)
	ts.SetReplicas(nil)
	if _, members = getStatus(t, ts); len(members) != 2 {
		t.Errorf("after SetReplicas(nil): members %v", keys(members))
	}
}

func keys(m map[string]json.RawMessage) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestResourcesCorruptObject(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	putStored(t, dir, schema.KindTenant, "broken", 1, []byte(`{"metadata":`))
	ts := startServer(t, Config{DataDir: dir}, false)
	for _, path := range []string{"/api/v1/tenants/broken", "/api/v1/tenants?labelSelector=env", "/api/v1/tenants"} {
		code, body := ts.do(t, req{method: "GET", path: path})
		wantCode(t, path, code, body, http.StatusInternalServerError)
		wantAPIError(t, body, http.StatusInternalServerError, api.ReasonInternalError, "server log")
	}
	if !strings.Contains(ts.logs.String(), `broken`) {
		t.Errorf("the log does not name the broken object:\n%s", ts.logs.String())
	}
}

// putStored writes a stored value into the bbolt store in dir by hand,
// past every check of the store, as a damaged or older file may hold it:
// under resources/KIND/KEY, the bbolt engine's layout (see store/bolt).
func putStored(t testing.TB, dir, kind, key string, rv uint64, data []byte) {
	t.Helper()
	openStore(t, dir).Close()
	db, err := bbolt.Open(filepath.Join(dir, bolt.DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(btx *bbolt.Tx) error {
		b, err := btx.Bucket([]byte("resources")).CreateBucketIfNotExists([]byte(kind))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), store.RecordValue(rv, data))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkResourceList measures list requests over real HTTP against a
// store of 5,000 machines in 10 tenants and 5,000 commits.
func BenchmarkResourceList(b *testing.B) {
	ts := startServer(b, Config{}, false)
	const n = 5000
	err := ts.Store().Update(func(tx store.Tx) error {
		for i := range 10 {
			name := fmt.Sprintf("t%d", i)
			if _, err := tx.PutObject(schema.KindTenant, name, storetest.Tenant(name, "prod", i)); err != nil {
				return err
			}
		}
		for i := range n {
			id := fmt.Sprintf("sim-%05d", i)
			role := schema.RoleWorker
			if i%10 == 0 {
				role = schema.RoleControlPlane
			}
			if _, err := tx.PutObject(schema.KindMachine, id, storetest.Machine(id, fmt.Sprintf("t%d", i%10), "ng", role, "small", i)); err != nil {
				return err
			}
			rev := fmt.Sprintf("%040x", i*7919)
			if _, err := tx.PutObject(schema.KindCommit, rev, storetest.Commit(rev, storetest.SeedTime.Add(time.Duration(i)*time.Second), schema.CommitSucceeded)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{}
	for _, bc := range []struct{ name, path string }{
		{"machines/page", "/api/v1/machines"},
		{"machines/selector", "/api/v1/machines?labelSelector=rezuscloud.io/role%3Dcontrolplane"},
		{"machines/limit1000", "/api/v1/machines?limit=1000"},
		{"tenant-machines", "/api/v1/tenants/t3/machines"},
		{"commits/newest", "/api/v1/commits?limit=10"},
		{"machine/get", "/api/v1/machines/sim-04321"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := client.Get(ts.URL() + bc.path)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d", bc.path, resp.StatusCode)
				}
			}
		})
	}
}
