package talosnode

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzReadSnapshot: whatever an EtcdRecover upload holds, reading it as a
// simulated snapshot returns data or an error, within its limits, and
// the data it returns, written and read again, are the same.
func FuzzReadSnapshot(f *testing.F) {
	for _, d := range []*etcdData{{}, {Revision: 7, Filler: 100, KV: map[string][]byte{"a": []byte("1"), "/registry/b": nil}}} {
		var b bytes.Buffer
		if err := writeSnapshot(&b, d); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte(snapshotMagic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte("not a snapshot"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := readSnapshot(bytes.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := writeSnapshot(&out, d); err != nil {
			t.Fatal(err)
		}
		again, err := readSnapshot(&out)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("a snapshot read, written and read again: %+v, then %+v, %v", d, again, err)
		}
	})
}
