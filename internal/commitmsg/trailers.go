// Package commitmsg reads git commit messages: the trailers at their end,
// found as `git interpret-trailers --parse` finds them, and a bounded copy
// of a message for storing and serving.
//
// It is the one parser of trailers in the project. The sources package
// reads the trailers of every commit from its full message, before the
// message is cut to its bound, and the reconciler looks them up; neither
// has a parser of its own. The package knows nothing of what a trailer
// means and imports nothing of the project.
package commitmsg

import "strings"

// Trailer is one "Key: value" line of a message's trailer block, as git
// parses it: the key and the value trimmed, and a value folded over
// several lines joined with single spaces.
type Trailer struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Trailers are a message's trailers in the order they appear.
type Trailers []Trailer

// Get returns the value of the last trailer whose key is key, compared
// without regard to case as git compares keys, and whether there is one.
func (t Trailers) Get(key string) (string, bool) {
	for i := len(t) - 1; i >= 0; i-- {
		if strings.EqualFold(t[i].Key, key) {
			return t[i].Value, true
		}
	}
	return "", false
}

// The markers git's trailer parser knows, with its default configuration
// (no trailer.* settings, core.commentChar "#").
const (
	commentPrefix = "#"
	scissors      = "\n" + commentPrefix + " ------------------------ >8 ------------------------\n"
)

// gitGenerated are trailers git itself writes; one of them lets a block
// that is only a quarter trailers count as a trailer block.
var gitGenerated = []string{"Signed-off-by: ", "(cherry picked from commit "}

// ParseTrailers returns the trailers of a commit message, the same ones
// `git interpret-trailers --parse` prints:
//
//   - The message ends at a NUL byte, at a line starting with "---" and a
//     space (a patch follows), and before trailing comment lines ("#"),
//     empty lines and anything under a scissors line.
//   - The first paragraph, the subject, never holds trailers.
//   - The trailer block is the last paragraph. Either all its lines are
//     trailers ("Key: value", the key of letters, digits and "-", then
//     optional blanks, a colon, and a value) or continuation lines (ones
//     that start with a blank), or it holds a trailer git writes itself,
//     such as "Signed-off-by: ", and at least a quarter of its lines are
//     trailers. Comment lines are skipped.
//   - A continuation line is part of the value of the trailer before it.
func ParseTrailers(message string) Trailers {
	if i := strings.IndexByte(message, 0); i >= 0 {
		message = message[:i]
	}
	end := endOfLogMessage(message)
	start := trailerBlockStart(message, end)
	var lines []string
	last := -1 // index in lines of the trailer a continuation extends
	for _, line := range splitLines(message[start:end]) {
		if last >= 0 && isSpace(line[0]) {
			lines[last] += line
			continue
		}
		lines = append(lines, line)
		last = -1
		if separator(line) >= 1 {
			last = len(lines) - 1
		}
	}
	var out Trailers
	for _, line := range lines {
		if strings.HasPrefix(line, commentPrefix) {
			continue
		}
		sep := separator(line)
		if sep < 1 {
			continue
		}
		out = append(out, Trailer{Key: trim(line[:sep]), Value: unfold(trim(line[sep+1:]))})
	}
	return out
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n') + 1
		if i == 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// endOfLogMessage is where the message proper ends: before a "---"
// divider and the comments, blank lines and scissors that trail it.
func endOfLogMessage(s string) int {
	end := len(s)
	for bol := 0; bol < len(s); bol = nextLine(s, bol) {
		if strings.HasPrefix(s[bol:], "---") && bol+3 < len(s) && isSpace(s[bol+3]) {
			end = bol
			break
		}
	}
	return end - ignoredBytes(s, end)
}

// ignoredBytes counts the bytes at the end of s[:n] that git leaves out of
// a message: a run of comment and empty lines (and an old "Conflicts:"
// block) at its end, and whatever follows a scissors line.
func ignoredBytes(s string, n int) int {
	cutoff := n
	if strings.HasPrefix(s, scissors[1:]) {
		cutoff = 0
	} else if i := strings.Index(s, scissors); i >= 0 && i+1 < n {
		cutoff = i + 1
	}
	boc, conflicts := 0, false
	for bol := 0; bol < cutoff; {
		next := strings.IndexByte(s[bol:n], '\n')
		if next < 0 {
			next = n
		} else {
			next += bol + 1
		}
		switch {
		case strings.HasPrefix(s[bol:], commentPrefix) || s[bol] == '\n':
			if boc == 0 {
				boc = bol
			}
		case strings.HasPrefix(s[bol:], "Conflicts:\n"):
			conflicts = true
			if boc == 0 {
				boc = bol
			}
		case conflicts && s[bol] == '\t':
		case boc != 0:
			boc, conflicts = 0, false
		}
		bol = next
	}
	if boc != 0 {
		return n - boc
	}
	return n - cutoff
}

// trailerBlockStart returns where the trailer block of s[:n] starts, or n
// when it has none.
func trailerBlockStart(s string, n int) int {
	// The first paragraph is the subject and never trailers.
	title := 0
	for ; title < n; title = nextLine(s, title) {
		if strings.HasPrefix(s[title:], commentPrefix) {
			continue
		}
		if isBlankLine(s[title:]) {
			break
		}
	}
	onlySpaces, gitPrefix := true, false
	trailers, others, continuations := 0, 0, 0
	for l := lastLine(s, n); l >= title; l = lastLine(s, l) {
		line := s[l:]
		switch {
		case strings.HasPrefix(line, commentPrefix):
			others += continuations
			continuations = 0
			continue
		case isBlankLine(line):
			if onlySpaces {
				continue
			}
			others += continuations
			if (gitPrefix && trailers*3 >= others) || (trailers > 0 && others == 0) {
				return nextLine(s, l)
			}
			return n
		}
		onlySpaces = false
		switch {
		case hasGitPrefix(line):
			trailers++
			continuations = 0
			gitPrefix = true
		case separator(line) >= 1 && !isSpace(line[0]):
			trailers++
			continuations = 0
		case isSpace(line[0]):
			continuations++
		default:
			others += 1 + continuations
			continuations = 0
		}
	}
	return n
}

func hasGitPrefix(line string) bool {
	for _, p := range gitGenerated {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// separator returns the index of the colon after a trailer's key at the
// start of line ("Key: ", "Key : "), or -1 when the line does not start
// like a trailer.
func separator(line string) int {
	blank := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ':':
			return i
		case !blank && (isAlnum(c) || c == '-'):
		case i > 0 && (c == ' ' || c == '\t'):
			blank = true
		default:
			return -1
		}
	}
	return -1
}

// unfold joins the lines of a folded value with single spaces.
func unfold(v string) string {
	if !strings.Contains(v, "\n") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '\n' {
			b.WriteByte(v[i])
			continue
		}
		for i+1 < len(v) && isSpace(v[i+1]) {
			i++
		}
		b.WriteByte(' ')
	}
	return trim(b.String())
}

// nextLine returns the offset of the line after the one at bol.
func nextLine(s string, bol int) int {
	if i := strings.IndexByte(s[bol:], '\n'); i >= 0 {
		return bol + i + 1
	}
	return len(s)
}

// lastLine returns the offset of the start of the last line of s[:n], or
// -1 when n is 0. A newline ending s[:n] belongs to its last line.
func lastLine(s string, n int) int {
	if n == 0 {
		return -1
	}
	if i := strings.LastIndexByte(s[:n-1], '\n'); i >= 0 {
		return i + 1
	}
	return 0
}

// isBlankLine reports whether the line at the start of s has only blanks.
func isBlankLine(s string) bool {
	for i := 0; i < len(s) && s[i] != '\n'; i++ {
		if !isSpace(s[i]) {
			return false
		}
	}
	return true
}

// isSpace is git's isspace: space, tab, newline and carriage return, but
// not vertical tab or form feed.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func trim(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}
