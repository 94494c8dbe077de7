package commitmsg

import (
	"strings"
	"unicode/utf8"
)

// Bounds of what is kept of a commit. git itself bounds none of them.
const (
	// MaxSubject is how many bytes of a message's first line are kept.
	MaxSubject = 1 << 10
	// MaxBody is how many bytes of a message after its first line are kept.
	MaxBody = 64 << 10
	// MaxLine is how many bytes are kept of a one-line field, such as an
	// author ("Name <email>") or a ref name.
	MaxLine = 1 << 10
)

// Ellipsis ends a one-line field that was cut.
const Ellipsis = "…"

// Bound returns what is kept of a commit message: its first line, cut to
// MaxSubject bytes, and at most MaxBody bytes of the rest, and whether
// anything was left out. Cuts fall on UTF-8 boundaries. Read the trailers
// of the full message, not of what Bound returns: they are at its end.
func Bound(message string) (string, bool) {
	subject, body, nl := strings.Cut(message, "\n")
	if len(subject) <= MaxSubject && len(body) <= MaxBody {
		return message, false
	}
	subject = cut(subject, MaxSubject)
	if !nl {
		return subject, true
	}
	return subject + "\n" + cut(body, MaxBody), true
}

// BoundLine returns a one-line field cut to at most max bytes, ending in
// Ellipsis when it was cut, and whether it was.
func BoundLine(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	return cut(s, max-len(Ellipsis)) + Ellipsis, true
}

// cut returns the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}
