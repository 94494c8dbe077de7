package backend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// A stored value is a header and the object's JSON. The header holds what
// lists and events read of an object without decoding it: the
// resourceVersion (8 bytes, big endian), createdAt (8 bytes, Unix
// nanoseconds; 0 when unknown), then where the metadata lies in the JSON
// as two uvarints, its start and its length (0 and 0 when unknown, as for
// an internal record).

// objectHead is what a value's header says of its object besides the
// resourceVersion.
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

// decodeResource splits a stored value; Object points into v.
func decodeResource(kind, key string, v []byte) (Resource, error) {
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

// restamp returns the API object data, of kind k, with its
// metadata.resourceVersion set to rv, and its header: decoded into its Go
// type and encoded again, which gives back the bytes PutObject writes.
func restamp(k schema.KindInfo, data []byte, rv uint64) ([]byte, objectHead, error) {
	obj := k.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, objectHead{}, err
	}
	obj.Meta().ResourceVersion = strconv.FormatUint(rv, 10)
	return encodeObject(obj)
}

// metaHead is the part of an object's metadata that events, lists and the
// tenant index read; decoding it alone is cheaper than all of it.
type metaHead struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

func (h metaHead) meta() schema.ObjectMeta { return schema.ObjectMeta{Name: h.Name, Labels: h.Labels} }

// decodeMeta decodes the resource's metadata into into: from the range
// the header gives, or else from the head of the object (see objectMeta).
func (r Resource) decodeMeta(into any) error {
	if r.head.metaEnd > 0 {
		if err := json.Unmarshal(r.Object[r.head.metaStart:r.head.metaEnd], into); err != nil {
			return fmt.Errorf("%s %q: metadata: %w", r.Kind, r.Name, err)
		}
		return nil
	}
	if err := objectMeta(r.Object, into); err != nil {
		return fmt.Errorf("%s %q: %w", r.Kind, r.Name, err)
	}
	return nil
}

// createdAt returns metadata.createdAt in Unix nanoseconds, from the
// header when it has it.
func (r Resource) createdAt() (int64, error) {
	if r.head.created != 0 || r.head.metaEnd > 0 {
		return r.head.created, nil
	}
	var m struct {
		CreatedAt time.Time `json:"createdAt"`
	}
	if err := r.decodeMeta(&m); err != nil || m.CreatedAt.IsZero() {
		return 0, err
	}
	return m.CreatedAt.UnixNano(), nil
}

// CreatedAt returns the object's metadata.createdAt, from the stored
// value's header when it has it, so that ordering objects by age needs
// no decoding; zero when the object has none.
func (r Resource) CreatedAt() (time.Time, error) {
	n, err := r.createdAt()
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.Unix(0, n).UTC(), nil
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
