package report

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

func TestMergeNote(t *testing.T) {
	sha := testSHA
	tests := []struct {
		name, old string
		ss        []Status
		want      string
	}{
		{"new", "", []Status{{SHA: sha, Context: "rezuscloud/b/x", State: StatePending, Description: "queued"},
			{SHA: sha, Context: "rezuscloud/a", State: StateRunning, Description: "applying\n2 tenants"}},
			"rezuscloud/a: running applying 2 tenants\nrezuscloud/b/x: pending queued\n"},
		{"replace own, keep others", "rezuscloud/a/x: pending queued\nrezuscloud/b/x: success no changes\n",
			[]Status{{SHA: sha, Context: "rezuscloud/a/x", State: StateFailure, Description: "failed: boom"}},
			"rezuscloud/a/x: failure failed: boom\nrezuscloud/b/x: success no changes\n"},
		{"foreign text stays first", "\nLGTM: ship it\r\nrezuscloud/b: success\n\n",
			[]Status{{SHA: sha, Context: "rezuscloud/a", State: StateSuccess}},
			"LGTM: ship it\nrezuscloud/a: success\nrezuscloud/b: success\n"},
		{"later status of a context wins", "",
			[]Status{{SHA: sha, Context: "rezuscloud/a", State: StatePending}, {SHA: sha, Context: "rezuscloud/a", State: StateSuccess}},
			"rezuscloud/a: success\n"},
	}
	for _, tt := range tests {
		if got := mergeNote(tt.old, tt.ss); got != tt.want {
			t.Errorf("%s: mergeNote = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A note in a fanout directory that holds other notes too is removed from
// it; the others stay.
func TestPutNoteFanout(t *testing.T) {
	st := memory.NewStorage()
	mine := "ab" + strings.Repeat("1", 38)
	sibling := "ab" + strings.Repeat("2", 38)
	elsewhere := "cd" + strings.Repeat("3", 38)
	blob := func(s string) plumbing.Hash {
		h, err := writeBlob(st, s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tree := func(entries ...object.TreeEntry) plumbing.Hash {
		h, err := writeTree(st, entries)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ab := tree(object.TreeEntry{Name: mine[2:], Mode: filemode.Regular, Hash: blob("old mine\n")},
		object.TreeEntry{Name: sibling[2:], Mode: filemode.Regular, Hash: blob("sibling\n")})
	cd := tree(object.TreeEntry{Name: elsewhere[2:], Mode: filemode.Regular, Hash: blob("elsewhere\n")})
	rootHash := tree(object.TreeEntry{Name: "cd", Mode: filemode.Dir, Hash: cd}, object.TreeEntry{Name: "ab", Mode: filemode.Dir, Hash: ab})
	root, err := object.GetTree(st, rootHash)
	if err != nil {
		t.Fatal(err)
	}
	read := func(tr *object.Tree, hex string) string {
		h, err := findNote(st, tr, hex)
		if err != nil {
			t.Fatal(err)
		}
		if h.IsZero() {
			return ""
		}
		s, err := readBlob(st, h)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := read(root, mine); got != "old mine\n" {
		t.Fatalf("fanout note read as %q", got)
	}
	newRoot, err := putNote(st, root, mine, blob("new mine\n"))
	if err != nil {
		t.Fatal(err)
	}
	nr, err := object.GetTree(st, newRoot)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range nr.Entries {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); got != "ab "+mine+" cd" {
		t.Errorf("root entries %s", got)
	}
	for hex, want := range map[string]string{mine: "new mine\n", sibling: "sibling\n", elsewhere: "elsewhere\n"} {
		if got := read(nr, hex); got != want {
			t.Errorf("note of %s = %q, want %q", hex[:4], got, want)
		}
	}
	sub, err := nr.Tree("ab")
	if err != nil || len(sub.Entries) != 1 || sub.Entries[0].Name != sibling[2:] {
		t.Errorf("ab/ holds %+v, %v", sub, err)
	}
	// Removing the last note of a fanout directory drops the directory.
	again, err := putNote(st, nr, sibling, blob("sibling 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	ar, _ := object.GetTree(st, again)
	if _, err := ar.Tree("ab"); err == nil {
		t.Error("the emptied ab/ stays")
	}
}

// git sorts a tree's entries by name, a directory as if it ended in "/".
func TestWriteTreeOrder(t *testing.T) {
	st := memory.NewStorage()
	b, _ := writeBlob(st, "x")
	sub, _ := writeTree(st, []object.TreeEntry{{Name: "f", Mode: filemode.Regular, Hash: b}})
	h, err := writeTree(st, []object.TreeEntry{
		{Name: "ab", Mode: filemode.Dir, Hash: sub},
		{Name: "ab.c", Mode: filemode.Regular, Hash: b},
		{Name: "ab0", Mode: filemode.Regular, Hash: b},
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := object.GetTree(st, h)
	var names []string
	for _, e := range tr.Entries {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); got != "ab.c ab ab0" {
		t.Fatalf("order %s, want ab.c ab ab0", got)
	}
}
