package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestStoredHeader checks what the header of a stored value says against
// its JSON: the metadata range decodes to the object's metadata, and
// createdAt is the metadata's; a delete's object carries the delete's
// revision and a header of its own.
func TestStoredHeader(t *testing.T) {
	created := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	objects := map[string]schema.Object{
		schema.KindTenant: &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant,
			Metadata: schema.ObjectMeta{Name: "alpha", UID: "u1", CreatedAt: created, Labels: map[string]string{"env": "prod"}}},
		schema.KindMachine: &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: "sim-a0", ResourceVersion: "7", CreatedAt: created.Add(time.Minute),
				Labels: map[string]string{schema.LabelTenant: "alpha", "metadata": `{"name":"x"}`}},
			Spec: schema.MachineSpec{Hostname: "metadata"}},
		schema.KindCommit: &schema.Commit{Kind: schema.KindCommit, Metadata: schema.ObjectMeta{Name: "c"}},
	}
	check := func(what string, r Resource) {
		t.Helper()
		var whole schema.ObjectMeta
		if err := objectMeta(r.Object, &whole); err != nil {
			t.Fatal(err)
		}
		var ranged schema.ObjectMeta
		if r.head.metaEnd == 0 || json.Unmarshal(r.Object[r.head.metaStart:r.head.metaEnd], &ranged) != nil || !cmp.Equal(whole, ranged) {
			t.Errorf("%s: header range %d..%d gives %+v, want %+v", what, r.head.metaStart, r.head.metaEnd, ranged, whole)
		}
		wantCreated := int64(0)
		if !whole.CreatedAt.IsZero() {
			wantCreated = whole.CreatedAt.UnixNano()
		}
		if r.head.created != wantCreated {
			t.Errorf("%s: header createdAt %d, want %d", what, r.head.created, wantCreated)
		}
	}
	rv := uint64(10)
	for kind, obj := range objects {
		rv++
		v, err := ObjectValue(rv, obj)
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeValue(kind, obj.Meta().Name, v)
		if err != nil || r.ResourceVersion != rv {
			t.Fatalf("%s: decoded at %d, %v; want %d", obj.Meta().Name, r.ResourceVersion, err, rv)
		}
		check("stored "+obj.Meta().Name, r)
		gone, _, err := DeletedObject(r, rv+100)
		if err != nil {
			t.Fatal(err)
		}
		check("deleted "+obj.Meta().Name, gone)
		var m schema.ObjectMeta
		if err := gone.DecodeMeta(&m); err != nil || m.ResourceVersion != strconv.FormatUint(rv+100, 10) {
			t.Errorf("deleted %s: resourceVersion %q, %v; want the delete's %d", obj.Meta().Name, m.ResourceVersion, err, rv+100)
		}
	}
	if r, err := DecodeValue("Record", "r", RecordValue(3, []byte(`{"metadata":{"name":"n"}}`))); err != nil || r.head != (objectHead{}) {
		t.Errorf("a record's header: %+v, %v; want one that says nothing", r.head, err)
	}
}

// FuzzStoredValue reads arbitrary bytes as a stored value, as a damaged
// file may hold them: reading it and its metadata must not panic.
func FuzzStoredValue(f *testing.F) {
	obj := &schema.Machine{Kind: schema.KindMachine, Metadata: schema.ObjectMeta{Name: "sim-1", Labels: map[string]string{schema.LabelTenant: "alpha"}, CreatedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}}
	data, head, err := encodeObject(obj)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeValue(7, head, data))
	f.Add(encodeValue(7, objectHead{}, []byte(`{"metadata":{"labels":{"a":"b"}}}`)))
	f.Add([]byte("short"))
	f.Add(append(make([]byte, 16), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, '{', '}'))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := DecodeValue(schema.KindMachine, "sim-1", v)
		if err != nil {
			return
		}
		var m MetaHead
		r.DecodeMeta(&m)
		r.CreatedAt()
	})
}

// FuzzObjectMeta checks objectMeta against encoding/json: for any JSON
// object whose keys are written as encoding/json writes them, it must give
// the metadata decoding the whole object gives, and for any input it must
// not panic.
func FuzzObjectMeta(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"rezuscloud.io/v1","kind":"Tenant","metadata":{"name":"a","uid":"u","labels":{"env":"prod"},"createdAt":"2026-01-01T00:00:00Z"},"spec":{}}`,
		`{"metadata":{"resourceVersion":"3","labels":{"a":"b"}}}`,
		`{"spec":{"metadata":{"x":1}},"metadata":{}}`,
		`{ "metadata" : { "labels" : { "k\"q" : "v\\" } } , "s" : [ "}" , "]" , {"a":[{}]} ] }`,
		`{}`, `[]`, `{"metadata":null}`, `{"a":"\u00e9"}`, `{"metadata":{"name":"x"}} `, `{"metadata":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var m schema.ObjectMeta
		err := objectMeta(in, &m)
		var full struct {
			Metadata schema.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(in, &full) != nil {
			return // any error will do, but no panic
		}
		lower := bytes.ToLower(in)
		for _, k := range []string{"metadata"} {
			// encoding/json matches keys ignoring case, and takes the
			// last of duplicates; the store writes each key once, exactly.
			if bytes.Count(lower, []byte(k)) != 1 || bytes.Contains(in, []byte(`\u`)) {
				return
			}
		}
		if in := bytes.TrimSpace(in); len(in) == 0 || in[0] != '{' {
			return
		}
		if err != nil {
			t.Fatalf("objectMeta(%s): %v", in, err)
		}
		if !cmp.Equal(full.Metadata, m) {
			t.Fatalf("objectMeta(%s) = %+v, want %+v", in, m, full.Metadata)
		}
	})
}
