package commitmsg

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBound(t *testing.T) {
	short := "Subject\n\nBody.\n\nKey: v\n"
	if got, cut := Bound(short); got != short || cut {
		t.Errorf("Bound(short) = %q, %v; want it unchanged", got, cut)
	}

	body := strings.Repeat("é", MaxBody) // two bytes each: a cut falls inside one
	got, cut := Bound("Subject\n" + body)
	if !cut || !strings.HasPrefix(got, "Subject\n") || len(got) > len("Subject\n")+MaxBody || len(got) < MaxBody {
		t.Errorf("long body: %d bytes, cut %v; want the subject and %d bytes of body", len(got), cut, MaxBody)
	}
	if !utf8.ValidString(got) {
		t.Error("the cut split a UTF-8 sequence")
	}

	got, cut = Bound(strings.Repeat("s", 20<<20))
	if !cut || len(got) != MaxSubject {
		t.Errorf("one 20 MB line: %d bytes, cut %v; want %d", len(got), cut, MaxSubject)
	}
	got, cut = Bound(strings.Repeat("s", 2*MaxSubject) + "\nbody")
	if !cut || got != strings.Repeat("s", MaxSubject)+"\nbody" {
		t.Errorf("long subject: %q, %v", got, cut)
	}
}

func TestBoundLine(t *testing.T) {
	if got, cut := BoundLine("A <a@b>", MaxLine); got != "A <a@b>" || cut {
		t.Errorf("BoundLine(short) = %q, %v", got, cut)
	}
	got, cut := BoundLine(strings.Repeat("ü", MaxLine), MaxLine)
	if !cut || len(got) > MaxLine || !strings.HasSuffix(got, Ellipsis) || !utf8.ValidString(got) {
		t.Errorf("BoundLine(long) = %d bytes, %v; want at most %d ending in %q", len(got), cut, MaxLine, Ellipsis)
	}
}
