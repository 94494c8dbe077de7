package schema

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unique"
)

// Source tells where a loaded manifest object came from. It is not part of
// the object's JSON form.
type Source struct {
	// File is the manifest's path relative to the root of the loaded fs.FS,
	// slash-separated.
	File string
	// Line is the line of the document's top-level mapping (its first key).
	Line int
	// Encrypted lists the JSON pointers (as in NewSource) of the values
	// that were SOPS-encrypted in the file, in path order: they hold
	// secrets, and every copy of the object that leaves the server's
	// memory shows them as schema.EncryptedValue.
	Encrypted []string
	// lines holds the line of the JSON pointer of every key and list item
	// of the document (see NewSource), as newSource encodes them.
	// Documents laid out alike share one copy: tens of thousands of
	// manifests made from a few templates hold a few of them.
	lines unique.Handle[string]
}

// NewSource returns the Source of a document in file whose top-level
// mapping is at line, and whose keys and list items are at lines: the JSON
// pointer of each (for example "/spec/providerConfig/shape" or
// "/spec/podNetwork/0", keys escaped as RFC 6901 says: "/" as "~1", "~" as
// "~0") to its line.
func NewSource(file string, line int, lines map[string]int) Source {
	return newSource(file, line, lines, func(l int) int { return l })
}

// newSource is NewSource with the line of each path taken from what lines
// holds by line.
func newSource[V any](file string, line int, lines map[string]V, lineOf func(V) int) Source {
	s := Source{File: file, Line: line}
	if len(lines) == 0 {
		return s
	}
	// Each path in path order: its length, the path and its line, as
	// uvarints and bytes.
	paths := make([]string, 0, len(lines))
	n := 0
	for p := range lines {
		paths = append(paths, p)
		n += len(p) + 2*binary.MaxVarintLen32
	}
	slices.Sort(paths)
	b := make([]byte, 0, n)
	for _, p := range paths {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
		b = binary.AppendUvarint(b, uint64(max(lineOf(lines[p]), 0)))
	}
	s.lines = unique.Make(string(b))
	return s
}

// eachLine calls f with the path and line of each key, in path order,
// until f returns false.
func (s Source) eachLine(f func(path string, line int) bool) {
	if s.lines == (unique.Handle[string]{}) {
		return
	}
	b := s.lines.Value()
	for len(b) > 0 {
		var n, line int
		n, b = uvarint(b)
		path := b[:n]
		line, b = uvarint(b[n:])
		if !f(path, line) {
			return
		}
	}
}

// uvarint decodes the uvarint at the start of b, which newSource wrote,
// and returns it and the rest of b.
func uvarint(b string) (int, string) {
	v, shift := 0, 0
	for i := 0; i < len(b); i++ {
		v |= int(b[i]&0x7f) << shift
		if b[i] < 0x80 {
			return v, b[i+1:]
		}
		shift += 7
	}
	return v, ""
}

// Lines returns the line of each key and list item by JSON pointer, as
// NewSource was given them.
func (s Source) Lines() map[string]int {
	out := map[string]int{}
	s.eachLine(func(path string, line int) bool {
		out[path] = line
		return true
	})
	return out
}

// lineAt returns the line of the key at path, or false.
func (s Source) lineAt(path string) (int, bool) {
	found, at := false, 0
	s.eachLine(func(p string, line int) bool {
		if p == path {
			found, at = true, line
		}
		return !found && p < path
	})
	return at, found
}

// LineOf returns the line of the key at the JSON pointer path; when that key
// is absent, the line of its nearest ancestor that is present; and s.Line when
// none is.
func (s Source) LineOf(path string) int {
	for {
		if line, ok := s.lineAt(path); ok && line > 0 {
			return line
		}
		i := strings.LastIndexByte(path, '/')
		if i < 0 {
			return s.Line
		}
		path = path[:i]
	}
}

// Position returns "file:line" for the key at path, as LineOf finds it.
func (s Source) Position(path string) string {
	return s.File + ":" + strconv.Itoa(s.LineOf(path))
}

// Equal reports whether s and o tell the same file, line, lines and
// encrypted values.
func (s Source) Equal(o Source) bool {
	return s.File == o.File && s.Line == o.Line && s.lines == o.lines && slices.Equal(s.Encrypted, o.Encrypted)
}

// MarshalJSON writes s as {"file", "line", "lines"}, lines as Lines gives
// them.
func (s Source) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		File  string         `json:"file"`
		Line  int            `json:"line"`
		Lines map[string]int `json:"lines,omitempty"`
	}{s.File, s.Line, s.Lines()})
}
