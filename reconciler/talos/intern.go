package talos

import (
	"strings"
	"sync"
)

// The observations of thousands of machines repeat the same short
// strings: service names and states, Talos and Kubernetes versions, the
// makers and models of their hardware, their extensions. Each answer
// decodes them anew, so intern keeps one copy of each, and an observation
// holds that copy instead of the answer's.

// internTable keeps one copy of each string it is given, up to max
// strings of at most maxInternSize bytes: a node chooses these strings,
// so neither their number nor their length may grow without end. Past
// the bounds a string is kept as it came.
type internTable struct {
	mu  sync.Mutex
	m   map[string]string
	max int
}

// maxInternSize is the longest string an internTable keeps.
const maxInternSize = 128

// interned is the plane's table, for 4,096 strings at most.
var interned = internTable{m: map[string]string{}, max: 4096}

// intern returns the plane's copy of s.
func intern(s string) string { return interned.intern(s) }

// intern returns the kept copy of s, keeping a copy of s first when there
// is room: s may be part of a larger string (a tag cut from an image
// reference), which the kept copy must not hold on to.
func (t *internTable) intern(s string) string {
	if s == "" || len(s) > maxInternSize {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if k, ok := t.m[s]; ok {
		return k
	}
	if len(t.m) >= t.max {
		return s
	}
	k := strings.Clone(s)
	t.m[k] = k
	return k
}
