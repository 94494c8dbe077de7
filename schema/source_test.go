package schema

import (
	"maps"
	"testing"
)

// A Source gives back the lines it was made with, finds a key's nearest
// present ancestor, and shares its lines with every Source of the same
// layout.
func TestSourceLines(t *testing.T) {
	lines := map[string]int{
		"":                               3,
		"/metadata":                      5,
		"/metadata/name":                 6,
		"/spec":                          8,
		"/spec/podNetwork/0":             9,
		"/spec/podNetwork/10":            19,
		"/spec/a~1b":                     20,
		"/spec/" + string(rune(0x1F600)): 300,
	}
	s := NewSource("t/tenant.yaml", 3, lines)
	if got := s.Lines(); !maps.Equal(got, lines) {
		t.Errorf("Lines() = %v, want %v", got, lines)
	}
	for path, want := range map[string]int{
		"/metadata/name":                 6,
		"/metadata/labels/team":          5, // absent: its parent
		"/spec/podNetwork/1":             8, // a prefix of /spec/podNetwork/10, absent
		"/spec/podNetwork/10":            19,
		"/spec/a~1b":                     20,
		"/spec/" + string(rune(0x1F600)): 300,
		"/status":                        3,
	} {
		if got := s.LineOf(path); got != want {
			t.Errorf("LineOf(%q) = %d, want %d", path, got, want)
		}
	}
	if s.Position("/spec") != "t/tenant.yaml:8" {
		t.Errorf("Position(/spec) = %s", s.Position("/spec"))
	}
	again := NewSource("t/tenant.yaml", 3, maps.Clone(lines))
	if !again.Equal(s) || again.lines.Value() == "" {
		t.Error("two Sources of the same layout are not equal")
	}
	other := NewSource("t/tenant.yaml", 3, map[string]int{"/spec": 8})
	if other.Equal(s) {
		t.Error("Sources of different lines are equal")
	}
	var zero Source
	if zero.LineOf("/spec") != 0 || len(zero.Lines()) != 0 {
		t.Error("the zero Source knows lines")
	}
}
