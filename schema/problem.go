package schema

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one thing wrong with the manifests, located as precisely as the
// input allows.
type Problem struct {
	File    string `json:"file"`    // path relative to the fs root, slash-separated
	Line    int    `json:"line"`    // 1-based; 0 when the problem concerns the whole file
	Column  int    `json:"column"`  // 1-based; 0 when unknown
	Path    string `json:"path"`    // JSON pointer inside the document, e.g. /spec/count; "" when not applicable
	Message string `json:"message"` // what is wrong, for a person
}

// String formats the problem compiler-style: "file:line:col: path: message",
// leaving out the parts that are unknown.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
		if p.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.Column))
		}
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ProblemList is the error Load returns when the manifests have problems. It
// holds all of them, sorted by file, line and column.
type ProblemList struct {
	Problems []Problem
}

// Error lists the problems, one per line.
func (l *ProblemList) Error() string {
	switch len(l.Problems) {
	case 0:
		return "no problems"
	case 1:
		return l.Problems[0].String()
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(l.Problems)))
	b.WriteString(" problems in manifests:")
	for _, p := range l.Problems {
		b.WriteString("\n")
		b.WriteString(p.String())
	}
	return b.String()
}

func compareProblems(a, b Problem) int {
	return cmp.Or(
		strings.Compare(a.File, b.File),
		cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Column, b.Column),
		strings.Compare(a.Path, b.Path),
		strings.Compare(a.Message, b.Message),
	)
}

// maxProblemsPerFile bounds the problems reported for one file, so that a
// hostile or badly broken file cannot flood a commit's status.
const maxProblemsPerFile = 100

// maxMessageLength bounds a problem's message, which may quote the input.
const maxMessageLength = 512

// capProblems keeps at most maxProblemsPerFile problems of each file of the
// sorted list ps, and says how many more there were. It also shortens
// messages beyond maxMessageLength.
func capProblems(ps []Problem) []Problem {
	for i := range ps {
		ps[i].Message = shorten(ps[i].Message, maxMessageLength)
	}
	out := ps[:0:0]
	for i := 0; i < len(ps); {
		j := i
		for j < len(ps) && ps[j].File == ps[i].File {
			j++
		}
		if n := j - i; n > maxProblemsPerFile {
			out = append(out, Problem{File: ps[i].File, Message: fmt.Sprintf("%d more problems in this file are not shown; fix the first %d and validate again", n-maxProblemsPerFile, maxProblemsPerFile)})
			out = append(out, ps[i:i+maxProblemsPerFile]...)
		} else {
			out = append(out, ps[i:j]...)
		}
		i = j
	}
	return out
}

// sortProblems sorts ps and drops exact repeats (the same problem can be
// found twice, e.g. through two aliases of one anchor).
func sortProblems(ps []Problem) []Problem {
	slices.SortFunc(ps, compareProblems)
	return slices.Compact(ps)
}

// shorten cuts s to at most n bytes, on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
