package schema

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
)

// CacheStore keeps what a Cache found in manifest files across processes,
// so that a server that restarts on the revision it had loaded parses
// none of its files again. A Cache uses it only for files whose file
// system names their content (ContentHasher) and only under the default
// Options (Decrypt aside), and it stores only files that had no problem: a
// file with a problem is parsed again, and so reported again, by every
// process. It never stores what a SOPS-encrypted file yielded, which may
// hold decrypted values.
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
	fmt.Fprintf(h, "rezuscloud manifest cache 4\x00")
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

// A file's result as a CacheStore holds it: the file's size (8 bytes, big
// endian), the count of skipped documents and of documents, then of each
// document its kind, line, name, tenant, key positions, the lines of its
// object's Source and the object. Numbers are uvarints, strings a uvarint
// length and the bytes. The positions are one "line col path" a line, the
// Source's lines one "line 0 path" a line; the object is its JSON form,
// which decodes back into the same Go value: every value a loaded object
// holds is one encoding/json gives (see decode.go).

// storedSize returns the file size a stored value records.
func storedSize(v []byte) (int64, bool) {
	if len(v) < 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// encodeResult encodes a file's result for a CacheStore; ok is false for a
// result that must not be stored, one with problems.
func encodeResult(r *fileResult, size int64) ([]byte, bool) {
	if len(r.problems) > 0 || r.sops {
		return nil, false
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(size))
	b = binary.AppendUvarint(b, uint64(r.skipped))
	b = binary.AppendUvarint(b, uint64(len(r.docs)))
	for _, d := range r.docs {
		if d.obj == nil {
			return nil, false
		}
		obj, err := json.Marshal(d.obj)
		if err != nil {
			return nil, false
		}
		pos, ok1 := encodePos(d.pos)
		lines := map[string]position{}
		sourceOf(d.obj).eachLine(func(path string, line int) bool {
			lines[path] = position{line: line}
			return true
		})
		src, ok2 := encodePos(lines)
		if !ok1 || !ok2 {
			return nil, false
		}
		b = appendString(b, d.kind)
		b = binary.AppendUvarint(b, uint64(d.line))
		b = appendString(b, d.name)
		b = appendString(b, d.tenant)
		b = appendString(b, pos)
		b = appendString(b, src)
		b = appendString(b, string(obj))
	}
	return b, true
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// storedReader reads a stored value; bad is set at the first field that
// is not there.
type storedReader struct {
	b   []byte
	bad bool
}

func (r *storedReader) uint() int {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > 1<<31 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *storedReader) bytes() []byte {
	n := r.uint()
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// sourceOf returns the Source of a loaded object.
func sourceOf(obj any) Source {
	switch o := obj.(type) {
	case *Tenant:
		return o.Source
	case *NodeGroup:
		return o.Source
	case *ConfigPatch:
		return o.Source
	}
	return Source{}
}

// encodePos encodes positions as text, one "line col path" a line; ok is
// false for a path that holds a line break.
func encodePos(pos map[string]position) (string, bool) {
	var b strings.Builder
	for k, p := range pos {
		if strings.Contains(k, "\n") {
			return "", false
		}
		fmt.Fprintf(&b, "%d %d %s\n", p.line, p.col, k)
	}
	return b.String(), true
}

// decodePos decodes the positions encodePos wrote.
func decodePos(s string) (map[string]position, bool) {
	pos := make(map[string]position, strings.Count(s, "\n"))
	for line := range strings.Lines(s) {
		l, rest, ok1 := strings.Cut(line, " ")
		c, key, ok2 := strings.Cut(rest, " ")
		ln, err1 := strconv.Atoi(l)
		col, err2 := strconv.Atoi(c)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || !strings.HasSuffix(key, "\n") {
			return nil, false
		}
		pos[key[:len(key)-1]] = position{line: ln, col: col}
	}
	return pos, true
}

// decodeResult decodes the stored result of the file name; ok is false
// when the value is not one encodeResult made.
func decodeResult(name string, data []byte) (*fileResult, bool) {
	if len(data) < 8 {
		return nil, false
	}
	rd := &storedReader{b: data[8:]}
	r := &fileResult{skipped: rd.uint()}
	n := rd.uint()
	if rd.bad || n > len(rd.b) {
		return nil, false
	}
	r.docs = make([]*document, 0, n)
	for range n {
		d := &document{file: name}
		d.kind = string(rd.bytes())
		d.line = rd.uint()
		d.name = string(rd.bytes())
		d.tenant = string(rd.bytes())
		pos := rd.bytes()
		srcLines := rd.bytes()
		obj := rd.bytes()
		var ok1, ok2 bool
		var lines map[string]position
		d.pos, ok1 = decodePos(string(pos))
		lines, ok2 = decodePos(string(srcLines))
		src := newSource(name, d.line, lines, func(p position) int { return p.line })
		if !ok1 || !ok2 || rd.bad || !decodeObject(d, obj, src) {
			return nil, false
		}
		r.docs = append(r.docs, d)
	}
	return r, len(rd.b) == 0
}

// decodeObject decodes a document's object from its JSON form, with its
// Source.
func decodeObject(d *document, data []byte, src Source) bool {
	var err error
	switch d.kind {
	case KindTenant:
		t := &Tenant{}
		err = json.Unmarshal(data, t)
		t.Source, d.obj = src, t
	case KindNodeGroup:
		ng := &NodeGroup{}
		err = json.Unmarshal(data, ng)
		ng.Source, d.obj = src, ng
	case KindConfigPatch:
		p := &ConfigPatch{}
		err = json.Unmarshal(data, p)
		p.Source, d.obj = src, p
	default:
		return false
	}
	return err == nil
}

// storeBatch is about how many bytes of values one write to a store
// holds: a Load writes what it parsed as it goes, so that a first load of
// tens of thousands of files holds neither all their values nor, in the
// store, all their pages at once.
const storeBatch = 2 << 20

// storeUse is what one Load does with a Cache's store: the values it
// found there, and the results it made that go there. Once the Load knows
// its files, dropStale drops the values no file of it has; the results then go to the store in batches of
// about storeBatch bytes as they come, and the last batch at the end.
type storeUse struct {
	store  CacheStore
	retain bool // this Load tells the store which values are still of use
	mu     sync.Mutex
	used   map[string]bool   // the keys of this Load's files, when retain is set
	put    map[string][]byte // results not yet stored
	size   int               // the bytes of put
	// writing orders the writes; failed is set when one failed.
	writing sync.Mutex
	failed  bool
}

// record notes a file of the Load, and its result to store when value is
// set; a full batch is written before record returns.
func (u *storeUse) record(key string, value []byte) {
	u.mu.Lock()
	if u.retain {
		u.used[key] = true
	}
	var full map[string][]byte
	if value != nil {
		u.put[key] = value
		u.size += len(key) + len(value)
		if u.size >= storeBatch {
			full, u.put, u.size = u.put, map[string][]byte{}, 0
		}
	}
	u.mu.Unlock()
	if full != nil {
		u.write(full)
	}
}

// dropStale drops, after the first Load that uses the store, the values
// no file of that Load has. The Load calls it once it knows its files and
// before it stores any result, so that the drop looks only at what
// earlier processes stored. A nil u does nothing.
func (u *storeUse) dropStale() {
	if u == nil || !u.retain {
		return
	}
	u.writing.Lock()
	defer u.writing.Unlock()
	if err := u.store.Retain(u.used); err != nil {
		u.failed = true
	}
}

// flush writes the results not yet stored.
func (u *storeUse) flush() {
	u.mu.Lock()
	rest := u.put
	u.put, u.size = map[string][]byte{}, 0
	u.mu.Unlock()
	if len(rest) > 0 {
		u.write(rest)
	}
}

func (u *storeUse) write(values map[string][]byte) {
	u.writing.Lock()
	defer u.writing.Unlock()
	if err := u.store.Put(values); err != nil {
		u.failed = true
	}
}

// validStoreKey reports whether a file can go to a store: its hash is one
// its file system named, and neither part holds the separator.
func validStoreKey(path, hash string) bool {
	return hash != "" && !strings.HasPrefix(hash, "sha256:") && !strings.Contains(path, "\x00") && !strings.Contains(hash, "\x00")
}
