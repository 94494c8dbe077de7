package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/rezuscloud/rezuscloud/schema"
)

// A stored value is a header and the object's JSON. The header holds what
// lists and events read of an object without decoding it: the revision
// (8 bytes, big endian), createdAt (8 bytes, Unix nanoseconds; 0 when
// unknown), then where the metadata lies in the JSON as two uvarints, its
// start and its length (0 and 0 when unknown, as for an internal record).
// Engines store resources as these values, so that every engine's lists
// read as cheaply.

// objectHead is what a value's header says of its object besides the
// revision.
type objectHead struct {
	created            int64
	metaStart, metaEnd int // metaEnd 0: not known
}

// encodeValue returns the stored value of data at rv.
func encodeValue(rv uint64, h objectHead, data []byte) []byte {
	v := make([]byte, 0, 16+2*binary.MaxVarintLen32+len(data))
	v = binary.BigEndian.AppendUint64(v, rv)
	v = binary.BigEndian.AppendUint64(v, uint64(h.created))
	v = binary.AppendUvarint(v, uint64(h.metaStart))
	v = binary.AppendUvarint(v, uint64(h.metaEnd-h.metaStart))
	return append(v, data...)
}

// RecordValue returns the stored value of an internal record's data at
// revision rv: a header that knows nothing of its metadata.
func RecordValue(rv uint64, data []byte) []byte {
	return encodeValue(rv, objectHead{}, data)
}

// DecodeValue splits the stored value v of kind/key into a Resource whose
// Object points into v.
func DecodeValue(kind, key string, v []byte) (Resource, error) {
	r := Resource{Kind: kind, Name: key}
	if len(v) < 16 {
		return r, fmt.Errorf("%s %q: stored value of %d bytes is too short", kind, key, len(v))
	}
	r.ResourceVersion = binary.BigEndian.Uint64(v)
	r.head.created = int64(binary.BigEndian.Uint64(v[8:]))
	start, n := binary.Uvarint(v[16:])
	length, m := binary.Uvarint(v[16+max(n, 0):])
	if n <= 0 || m <= 0 {
		return r, fmt.Errorf("%s %q: stored value has a damaged header", kind, key)
	}
	r.Object = v[16+n+m:]
	if size := uint64(len(r.Object)); length > 0 && start <= size && length <= size-start {
		r.head.metaStart, r.head.metaEnd = int(start), int(start+length)
	}
	return r, nil
}

// encodeObject encodes obj and its header. encoding/json writes the
// metadata inside the object as it writes it alone, and every kind's Go
// type writes it after apiVersion and kind (strings) and before spec and
// status, so its first occurrence in the object is it.
func encodeObject(obj schema.Object) ([]byte, objectHead, error) {
	var h objectHead
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, h, err
	}
	m := obj.Meta()
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, h, err
	}
	if !m.CreatedAt.IsZero() {
		h.created = m.CreatedAt.UnixNano()
	}
	if start := bytes.Index(data, meta); start >= 0 {
		h.metaStart, h.metaEnd = start, start+len(meta)
	}
	return data, h, nil
}

// ObjectValue returns the stored value of obj, an API object, at revision
// rv; obj's metadata is encoded as it is.
func ObjectValue(rv uint64, obj schema.Object) ([]byte, error) {
	data, head, err := encodeObject(obj)
	if err != nil {
		return nil, err
	}
	return encodeValue(rv, head, data), nil
}

// RestampValue returns the stored value of data, the JSON of an object of
// the API kind kind, with its metadata.resourceVersion set to rv: decoded
// into its Go type and encoded again, which gives back the bytes
// PutObject writes. It is how an engine migrates objects stored without
// their revision inside.
func RestampValue(kind string, data []byte, rv uint64) ([]byte, error) {
	k, ok := schema.LookupKind(kind)
	if !ok {
		return nil, fmt.Errorf("%s is not an API kind", kind)
	}
	obj := k.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, err
	}
	obj.Meta().ResourceVersion = strconv.FormatUint(rv, 10)
	return ObjectValue(rv, obj)
}

// objectMeta decodes the metadata of the JSON object data into into, for
// an object whose header does not say where it lies (a logged change, an
// older value). It reads nothing after the metadata.
func objectMeta(data []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("decode object: not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("decode object: %w", err)
		}
		if t == "metadata" {
			if err := dec.Decode(into); err != nil {
				return fmt.Errorf("decode object: metadata: %w", err)
			}
			return nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("decode object: %w", err)
		}
	}
	return nil
}
