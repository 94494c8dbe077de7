package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// CacheStore keeps what a Cache found in manifest files across processes,
// so that a server that restarts on the revision it had loaded parses
// none of its files again. A Cache uses it only for files whose file
// system names their content (ContentHasher) and only under the default
// Options, and it stores only files that had no problem: a file with a
// problem is parsed again, and so reported again, by every process.
//
// Keys are a file's path, a NUL byte and its content hash; values are
// opaque to the store. A store must hold the values of one CacheFormat
// only.
type CacheStore interface {
	// Get returns the value of key, or nil.
	Get(key string) []byte
	// Put stores the values, and drops the other values of their paths.
	Put(values map[string][]byte) error
	// Retain drops every value whose key keep does not hold.
	Retain(keep map[string]bool) error
}

// CacheFormat names the encoding of a CacheStore's values and the rules
// that made them (the JSON Schemas of the kinds): a store of another
// format must be emptied before a Cache uses it. Add the program's
// version: another build may parse differently.
func CacheFormat() string {
	h := sha256.New()
	fmt.Fprintf(h, "rezuscloud manifest cache 1\x00")
	_ = fs.WalkDir(schemaFS, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := schemaFS.ReadFile(name)
			fmt.Fprintf(h, "%s\x00%d\x00%s", name, len(data), data)
		}
		return nil
	})
	return "manifests-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// storeKey is the key of path and content hash in a CacheStore.
func storeKey(path, hash string) string { return path + "\x00" + hash }

// storedFile is a file's result as a CacheStore holds it. The objects are
// their JSON form, which decodes back into the same Go values: every value
// a loaded object holds is one encoding/json gives (see decode.go).
type storedFile struct {
	Skipped int         `json:"skipped,omitempty"`
	Docs    []storedDoc `json:"docs"`
}

type storedDoc struct {
	Kind   string            `json:"kind"`
	Line   int               `json:"line"`
	Pos    map[string][2]int `json:"pos"`
	Name   string            `json:"name"`
	Tenant string            `json:"tenant,omitempty"`
	Object json.RawMessage   `json:"object"`
}

// encodeResult encodes a file's result for a CacheStore; ok is false for a
// result that must not be stored, one with problems.
func encodeResult(r *fileResult) ([]byte, bool) {
	if len(r.problems) > 0 {
		return nil, false
	}
	sf := storedFile{Skipped: r.skipped, Docs: make([]storedDoc, 0, len(r.docs))}
	for _, d := range r.docs {
		if d.obj == nil {
			return nil, false
		}
		obj, err := json.Marshal(d.obj)
		if err != nil {
			return nil, false
		}
		pos := make(map[string][2]int, len(d.pos))
		for k, p := range d.pos {
			pos[k] = [2]int{p.line, p.col}
		}
		sf.Docs = append(sf.Docs, storedDoc{Kind: d.kind, Line: d.line, Pos: pos, Name: d.name, Tenant: d.tenant, Object: obj})
	}
	b, err := json.Marshal(sf)
	return b, err == nil
}

// decodeResult decodes the stored result of the file name; ok is false
// when the value is not one encodeResult made.
func decodeResult(name string, data []byte) (*fileResult, bool) {
	var sf storedFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return nil, false
	}
	r := &fileResult{skipped: sf.Skipped, docs: make([]*document, 0, len(sf.Docs))}
	for _, sd := range sf.Docs {
		d := &document{kind: sd.Kind, file: name, line: sd.Line, pos: make(map[string]position, len(sd.Pos)), name: sd.Name, tenant: sd.Tenant}
		for k, p := range sd.Pos {
			d.pos[k] = position{line: p[0], col: p[1]}
		}
		var err error
		switch sd.Kind {
		case KindTenant:
			t := &Tenant{}
			err = json.Unmarshal(sd.Object, t)
			t.Source, d.obj = d.source(), t
		case KindNodeGroup:
			ng := &NodeGroup{}
			err = json.Unmarshal(sd.Object, ng)
			ng.Source, d.obj = d.source(), ng
		case KindConfigPatch:
			p := &ConfigPatch{}
			err = json.Unmarshal(sd.Object, p)
			p.Source, d.obj = d.source(), p
		default:
			return nil, false
		}
		if err != nil {
			return nil, false
		}
		r.docs = append(r.docs, d)
	}
	return r, true
}

// storeUse is what one Load does with a Cache's store: the values it
// found there, and the results it made that go there.
type storeUse struct {
	retain bool // this Load tells the store which values are still of use
	mu     sync.Mutex
	used   map[string]bool   // the keys of this Load's files, when retain is set
	put    map[string][]byte // results to store
}

func (u *storeUse) record(key string, value []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.retain {
		u.used[key] = true
	}
	if value != nil {
		u.put[key] = value
	}
}

// validStoreKey reports whether a file can go to a store: its hash is one
// its file system named, and neither part holds the separator.
func validStoreKey(path, hash string) bool {
	return hash != "" && !strings.HasPrefix(hash, "sha256:") && !strings.Contains(path, "\x00") && !strings.Contains(hash, "\x00")
}
