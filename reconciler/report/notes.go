package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// noteLine is the line of a note that holds one status:
// "<context>: <state> <description>".
func noteLine(s Status) string {
	line := s.Context + ": " + string(s.State)
	if d := truncate(s.Description, MaxDescription); d != "" {
		line += " " + d
	}
	return line
}

// mergeNote returns the note text old with the lines of the statuses'
// contexts replaced by theirs. Lines of other contexts stay: those of
// other RezusCloud instances, and any other text, which keeps its place
// before them. The status lines are sorted by context, so two writers that
// merge the same lines get the same text.
func mergeNote(old string, ss []Status) string {
	var other []string
	ours := map[string]string{}
	for line := range strings.SplitSeq(old, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		ctx, _, ok := strings.Cut(line, ": ")
		if ok && strings.HasPrefix(ctx, ContextPrefix) {
			ours[ctx] = line
			continue
		}
		other = append(other, line)
	}
	for _, s := range ss {
		ours[s.Context] = noteLine(s)
	}
	keys := make([]string, 0, len(ours))
	for k := range ours {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, line := range other {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	for _, k := range keys {
		b.WriteString(ours[k])
		b.WriteByte('\n')
	}
	return b.String()
}

// findNote looks up the note of the object hex in a notes tree, flat
// ("abcdef…") or fanned out ("ab/cdef…", "ab/cd/ef…"). It returns the
// note blob's hash, or the zero hash when there is none.
func findNote(st storer.EncodedObjectStorer, tree *object.Tree, hex string) (plumbing.Hash, error) {
	for _, e := range tree.Entries {
		switch {
		case e.Name == hex && e.Mode.IsFile():
			return e.Hash, nil
		case e.Mode == filemode.Dir && len(e.Name) == 2 && len(hex) > 2 && e.Name == hex[:2]:
			sub, err := object.GetTree(st, e.Hash)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			h, err := findNote(st, sub, hex[2:])
			if err != nil || !h.IsZero() {
				return h, err
			}
		}
	}
	return plumbing.ZeroHash, nil
}

// putNote writes a notes tree that is tree (nil for none) with the note of
// hex set to blob at the top level, and with any fanned-out note of hex
// removed. It returns the new tree's hash.
func putNote(st storer.EncodedObjectStorer, tree *object.Tree, hex string, blob plumbing.Hash) (plumbing.Hash, error) {
	entries, err := withoutNote(st, tree, hex)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	entries = append(entries, object.TreeEntry{Name: hex, Mode: filemode.Regular, Hash: blob})
	return writeTree(st, entries)
}

// withoutNote returns the entries of tree without the note of hex, flat or
// fanned out; subtrees left empty are dropped.
func withoutNote(st storer.EncodedObjectStorer, tree *object.Tree, hex string) ([]object.TreeEntry, error) {
	if tree == nil {
		return nil, nil
	}
	out := make([]object.TreeEntry, 0, len(tree.Entries)+1)
	for _, e := range tree.Entries {
		switch {
		case e.Name == hex && e.Mode.IsFile():
			continue
		case e.Mode == filemode.Dir && len(e.Name) == 2 && len(hex) > 2 && e.Name == hex[:2]:
			sub, err := object.GetTree(st, e.Hash)
			if err != nil {
				return nil, err
			}
			subEntries, err := withoutNote(st, sub, hex[2:])
			if err != nil {
				return nil, err
			}
			if len(subEntries) == len(sub.Entries) {
				break
			}
			if len(subEntries) == 0 {
				continue
			}
			h, err := writeTree(st, subEntries)
			if err != nil {
				return nil, err
			}
			e.Hash = h
		}
		out = append(out, e)
	}
	return out, nil
}

// writeTree stores a tree of entries in git's order: by name, a directory
// sorting as if its name ended in "/".
func writeTree(st storer.EncodedObjectStorer, entries []object.TreeEntry) (plumbing.Hash, error) {
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
	obj := st.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

// writeBlob stores text as a blob.
func writeBlob(st storer.EncodedObjectStorer, text string) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := io.WriteString(w, text); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

// readBlob returns a note blob's content. A note larger than maxNote is
// an error: it is no note of ours, and rewriting it would lose it.
func readBlob(st storer.EncodedObjectStorer, h plumbing.Hash) (string, error) {
	b, err := object.GetBlob(st, h)
	if err != nil {
		return "", err
	}
	if b.Size > maxNote {
		return "", fmt.Errorf("note blob %s holds %d bytes, more than a note of statuses can: leaving it alone", h, b.Size)
	}
	r, err := b.Reader()
	if err != nil {
		return "", err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return string(data), err
}

// maxNote bounds the size of a note this package rewrites.
const maxNote = 1 << 20
