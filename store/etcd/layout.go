package etcd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/store"
)

// The store's keys in etcd, under the prefix P:
//
//	P d/rev              the store's head: its revision and the event log's
//	                     horizon (JSON head); every commit writes it, and
//	                     every commit is conditional on it being unchanged
//	                     since the transaction's snapshot
//	P d/r/KIND/KEY       a resource's stored value (see store.DecodeValue)
//	P d/s/KEY            bytes of the series area
//	P d/t/NAME           a TF state: its kept versions' meta and where
//	                     each version's bytes are (JSON stateRecord)
//	P d/l/NAME           the lock held on a TF state (JSON store.Lock),
//	                     bound to the holder's lease when it has one
//	P d/pending          a large commit's writes (a blob of encodeBatch),
//	                     while they are being written (see pending.go)
//	P d/e/REV            the changes of one commit, whose first change
//	                     took revision REV (20 decimal digits)
//	P c/ID/N             chunk N (6 decimal digits) of the blob ID
//
// Everything a replica mirrors lies under P d/, which it watches; blobs
// lie beside it, so that their bytes are read when needed, not streamed
// to every replica. A value under d/r, d/s or d/e is a tag byte, then
// the bytes themselves (tagInline) or the JSON blobRef of a blob that
// holds them (tagBlob). A TF state's bytes are always a blob.
const (
	dataDir    = "d/"
	headKey    = "d/rev"
	pendingKey = "d/pending"
	resDir     = "d/r/"
	seriesDir  = "d/s/"
	stateDir   = "d/t/"
	lockDir    = "d/l/"
	eventDir   = "d/e/"
	chunkDir   = "c/"
)

// Value tags.
const (
	tagInline byte = 0
	tagBlob   byte = 1
)

// Sizes that keep every request under etcd's request limit (1.5 MiB by
// default, --max-request-bytes).
const (
	// chunkSize is the most bytes one chunk of a blob holds.
	chunkSize = 1 << 20
	// inlineMax is the largest value stored inline; larger ones are
	// blobs.
	inlineMax = 64 << 10
	// txnBudget bounds the bytes of one transaction's keys and values.
	txnBudget = 1280 << 10
)

// head is the value of headKey.
type head struct {
	// Rev is the store's revision: the one its last change took.
	Rev uint64 `json:"rev"`
	// From is the event log's horizon: it holds every change above it.
	From uint64 `json:"from"`
}

// blobRef says where a blob's bytes are and how to check them.
type blobRef struct {
	ID     string `json:"id"`
	Chunks int    `json:"chunks"`
	Size   int64  `json:"size"`
	CRC    uint32 `json:"crc"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// newBlobRef returns the reference of data stored as a new blob.
func newBlobRef(data []byte) blobRef {
	return blobRef{
		ID:     store.NewUID(),
		Chunks: chunkCount(len(data)),
		Size:   int64(len(data)),
		CRC:    crc32.Checksum(data, castagnoli),
	}
}

// chunkCount returns how many chunks a blob of size bytes has.
func chunkCount(size int) int { return max(1, (size+chunkSize-1)/chunkSize) }

// check verifies that data is the blob's bytes.
func (r blobRef) check(data []byte) error {
	if int64(len(data)) != r.Size || crc32.Checksum(data, castagnoli) != r.CRC {
		return fmt.Errorf("blob %s: read %d bytes that do not match its %d bytes", r.ID, len(data), r.Size)
	}
	return nil
}

// chunk returns chunk i of data stored as a blob.
func chunk(data []byte, i int) []byte {
	return data[min(i*chunkSize, len(data)):min((i+1)*chunkSize, len(data))]
}

func (s *Store) blobDir(id string) string         { return s.prefix + chunkDir + id + "/" }
func (s *Store) chunkKey(id string, i int) string { return s.blobDir(id) + chunkName(i) }
func chunkName(i int) string                      { return fmt.Sprintf("%06d", i) }

func resKey(kind, key string) string { return resDir + kind + "/" + key }
func eventKey(rev uint64) string     { return fmt.Sprintf("%s%020d", eventDir, rev) }

// encodeTagged returns the tagged value of inline bytes or of a blob.
func encodeTagged(data []byte, ref *blobRef) []byte {
	if ref == nil {
		return append([]byte{tagInline}, data...)
	}
	b, _ := json.Marshal(ref)
	return append([]byte{tagBlob}, b...)
}

// decodeTagged splits a tagged value into its inline bytes or its blob's
// reference.
func decodeTagged(v []byte) ([]byte, *blobRef, error) {
	if len(v) == 0 {
		return nil, nil, errors.New("empty value")
	}
	switch v[0] {
	case tagInline:
		return v[1:], nil, nil
	case tagBlob:
		var ref blobRef
		if err := json.Unmarshal(v[1:], &ref); err != nil {
			return nil, nil, fmt.Errorf("blob reference: %w", err)
		}
		return nil, &ref, nil
	}
	return nil, nil, fmt.Errorf("unknown value tag %d", v[0])
}

// stateRecord is the value of a TF state's key.
type stateRecord struct {
	// Last is the number the last version took; Current the current
	// version's, 0 for none.
	Last    uint64 `json:"last"`
	Current uint64 `json:"current"`
	// Versions are the kept versions, oldest first.
	Versions []stateVersion `json:"versions"`
}

// stateVersion is one kept version of a TF state.
type stateVersion struct {
	Version uint64          `json:"version"`
	Meta    store.StateMeta `json:"meta"`
	Data    blobRef         `json:"data"`
}

// version returns the kept version v, or nil.
func (r *stateRecord) version(v uint64) *stateVersion {
	for i := range r.Versions {
		if r.Versions[i].Version == v {
			return &r.Versions[i]
		}
	}
	return nil
}

var changeTypeCodes = map[store.EventType]byte{store.Added: 'A', store.Modified: 'M', store.Deleted: 'D'}

// encodeChanges returns the logged form of one commit's changes: for each,
// the type, the kind and the name (each a uvarint length and bytes) and
// the stored value (a uvarint length and bytes), whose header carries the
// change's revision.
func encodeChanges(cs []loggedChange) []byte {
	var buf []byte
	for _, c := range cs {
		buf = append(buf, changeTypeCodes[c.Type])
		for _, f := range [][]byte{[]byte(c.Kind), []byte(c.Name), c.Value} {
			buf = binary.AppendUvarint(buf, uint64(len(f)))
			buf = append(buf, f...)
		}
	}
	return buf
}

// loggedChange is one change as a commit logs it.
type loggedChange struct {
	Type       store.EventType
	Kind, Name string
	Value      []byte
}

// decodeChanges decodes what encodeChanges wrote into changes whose
// Objects point into b.
func decodeChanges(b []byte) ([]store.Change, error) {
	var out []store.Change
	for len(b) > 0 {
		var c store.Change
		switch b[0] {
		case 'A':
			c.Type = store.Added
		case 'M':
			c.Type = store.Modified
		case 'D':
			c.Type = store.Deleted
		default:
			return nil, fmt.Errorf("logged change: unknown type %q", b[0])
		}
		b = b[1:]
		var fields [3][]byte
		for i := range fields {
			n, w := binary.Uvarint(b)
			if w <= 0 || n > uint64(len(b)-w) {
				return nil, errors.New("logged change: truncated")
			}
			fields[i], b = b[w:w+int(n)], b[w+int(n):]
		}
		r, err := store.DecodeValue(string(fields[0]), string(fields[1]), fields[2])
		if err != nil {
			return nil, fmt.Errorf("logged change: %w", err)
		}
		c.Resource = r
		out = append(out, c)
	}
	return out, nil
}

// parseEventKey returns the revision of an event record's key.
func parseEventKey(k string) (uint64, error) {
	return strconv.ParseUint(strings.TrimPrefix(k, eventDir), 10, 64)
}
