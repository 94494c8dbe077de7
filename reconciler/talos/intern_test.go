package talos

import (
	"strings"
	"testing"
	"unsafe"
)

// TestInternKeepsOneCopyWithinBounds: equal strings come back as one
// copy, which holds nothing of a larger string it was cut from; past the
// table's bound on strings, or its size, a string comes back as it came
// and is not kept.
func TestInternKeepsOneCopyWithinBounds(t *testing.T) {
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	tab := internTable{m: map[string]string{}, max: 2}

	image := "ghcr.io/siderolabs/kubelet:v1.34.1"
	tag := image[strings.LastIndex(image, ":")+1:]
	first := tab.intern(tag)
	if first != tag || same(first, tag) {
		t.Fatalf("intern(%q) = %q, sharing the image's bytes %v; want a copy of its own", tag, first, same(first, tag))
	}
	again := tab.intern(strings.Clone(tag))
	if !same(again, first) {
		t.Errorf("an equal string came back as another copy")
	}

	tab.intern("Running")
	past := strings.Clone("Waiting")
	if got := tab.intern(past); !same(got, past) || len(tab.m) != 2 {
		t.Errorf("past the bound of 2 strings: got another copy %v, table of %d; want the string as it came, 2 kept", !same(got, past), len(tab.m))
	}
	long := strings.Repeat("x", maxInternSize+1)
	roomy := internTable{m: map[string]string{}, max: 8}
	if got := roomy.intern(long); !same(got, long) || len(roomy.m) != 0 {
		t.Errorf("a string longer than %d bytes: copied %v, %d kept; want it as it came, none kept", maxInternSize, !same(got, long), len(roomy.m))
	}
}
