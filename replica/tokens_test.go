package replica

import (
	"crypto/sha256"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
)

// TestSharedToken: a credential that one replica shares is found by
// another, by its digest alone, until the minter removes it or its lease
// ends (here: the minter is cut off from etcd).
func TestSharedToken(t *testing.T) {
	c := etcdtest.Start(t, 1)
	chk := newChecker(t)
	p := newProxy(t, hostOf(t, c.Endpoints()[0]))
	a, b := start(t, chk, "a", p.URL()), start(t, chk, "b", c.Endpoints()...)
	a.proxy = p
	waitUntil(t, testTTL, "both replicas are ready", func() bool { return a.r.Ready() && b.r.Ready() })

	digest := sha256.Sum256([]byte("rzc_secret"))
	find := func() (string, bool) {
		t.Helper()
		v, ok, err := b.r.SharedToken(t.Context(), digest[:])
		if err != nil {
			t.Fatal(err)
		}
		return string(v), ok
	}
	if v, ok := find(); ok {
		t.Fatalf("a digest nobody shared is found: %q", v)
	}
	remove, err := a.r.ShareToken(t.Context(), digest[:], []byte(`{"name":"run-a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := find(); !ok || v != `{"name":"run-a"}` {
		t.Fatalf("b finds %q %v, want what a shared", v, ok)
	}
	other := sha256.Sum256([]byte("rzc_other"))
	if _, ok, err := b.r.SharedToken(t.Context(), other[:]); ok || err != nil {
		t.Fatalf("another digest is found (%v, %v)", ok, err)
	}
	remove()
	if _, ok := find(); ok {
		t.Fatal("a removed credential is still found")
	}

	if _, err := a.r.ShareToken(t.Context(), digest[:], []byte(`{"name":"run-a"}`)); err != nil {
		t.Fatal(err)
	}
	key, _ := a.r.Fence()
	expired := expiry(t, c.Client(t), key)
	p.Cut()
	<-expired
	if _, ok := find(); ok {
		t.Error("a credential of a replica whose lease ended is still found")
	}
	if _, err := a.r.ShareToken(t.Context(), digest[:], nil); err == nil {
		t.Error("a fenced replica shared a credential")
	}
}
