package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// aliasSlack is how many nodes alias expansion may add to a file beyond
// the number of nodes written in it. Real manifests use a few small anchors;
// a "billion laughs" document needs far more.
const aliasSlack = 10000

var aliasBombMessage = fmt.Sprintf("YAML aliases expand to too many nodes (a \"billion laughs\" document?): aliases may add no more nodes than the file writes out, plus %d", aliasSlack)

// position is a 1-based line and column in a file.
type position struct{ line, col int }

// parseDocuments splits data into YAML documents, as node trees. A syntax
// error ends the stream: the documents before it are returned with the error.
// Empty documents (nothing but comments, or a bare "---") are dropped.
func parseDocuments(data []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		if !emptyDocument(&n) {
			docs = append(docs, &n)
		}
	}
}

func emptyDocument(n *yaml.Node) bool {
	if n.Kind == 0 {
		return true
	}
	if n.Kind != yaml.DocumentNode {
		return false
	}
	if len(n.Content) == 0 {
		return true
	}
	c := n.Content[0]
	return c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null" && c.Value == "" && c.Anchor == ""
}

var (
	yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unknownAnchor = regexp.MustCompile(`unknown anchor '(.*)' referenced`)
)

// lastLine returns the number of the last line of data that holds text.
func lastLine(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return max(n, 1)
}

// find returns the line and column of the first occurrence of s in data, or
// zeros.
func find(data []byte, s string) (int, int) {
	i := bytes.Index(data, []byte(s))
	if i < 0 {
		return 0, 0
	}
	before := data[:i]
	line := bytes.Count(before, []byte("\n")) + 1
	col := i - bytes.LastIndexByte(before, '\n')
	return line, col
}

// syntaxProblem turns an error of the YAML parser into a problem, naming tabs
// used for indentation plainly, since the parser's words for them do not.
func syntaxProblem(file string, data []byte, err error) Problem {
	msg := err.Error()
	line := 0
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	// The parser's own errors ("did not find expected ...", as opposed to
	// the scanner's) count lines from 0.
	if line > 0 && (strings.HasPrefix(msg, "did not find expected") || strings.HasPrefix(msg, "found incompatible") || strings.HasPrefix(msg, "found duplicate")) {
		line++
	}
	// Errors at the end of the input can name the line after the last.
	if last := lastLine(data); line > last {
		line = last
	}
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		l, c := find(data, "*"+m[1])
		return Problem{File: file, Line: l, Column: c, Message: fmt.Sprintf("alias *%s refers to no anchor (&%s) defined before it", m[1], m[1])}
	}
	if strings.Contains(msg, "exceeded max depth") {
		return Problem{File: file, Line: line, Message: "YAML nesting is too deep: " + msg}
	}
	if tl, tc, ok := indentTab(data, line); ok {
		return Problem{File: file, Line: tl, Column: tc, Message: "tab character in indentation: YAML indents with spaces only"}
	}
	return Problem{File: file, Line: line, Message: "YAML syntax error: " + msg}
}

// indentTab finds a tab in the leading whitespace of the given line or the
// line before it (the parser reports some errors one line late).
func indentTab(data []byte, line int) (int, int, bool) {
	if line <= 0 {
		return 0, 0, false
	}
	lines := bytes.SplitN(data, []byte("\n"), line+1)
	for _, l := range []int{line, line - 1} {
		if l < 1 || l > len(lines) {
			continue
		}
		text := lines[l-1]
		for i, c := range text {
			if c == '\t' {
				return l, i + 1, true
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0, 0, false
}

// converter turns a YAML node tree into the JSON-like value (map[string]any,
// []any, string, bool, int, float64, nil) that the JSON Schema validator and
// encoding/json take, and records the position of every key and list item
// by JSON pointer. It follows aliases and merge keys within a budget, bounds
// the nesting depth, and reports duplicate keys.
type converter struct {
	file     string
	maxDepth int
	budget   *int // nodes that alias expansion may still add, shared by the documents of a file
	pos      map[string]position
	problems []Problem
	fatal    bool         // a guard tripped: the value is incomplete
	active   []*yaml.Node // anchors being expanded, to catch an alias inside its own anchor
	memo     map[*yaml.Node]expansion
}

// newConverter returns a converter that spends budget. Give every document
// of a file the same budget, of aliasBudget(docs): anchors stay defined from
// one document to the next, so a budget per document would let many small
// documents each expand one large anchor.
func newConverter(file string, maxDepth int, budget *int, withPositions bool) *converter {
	c := &converter{file: file, maxDepth: maxDepth, budget: budget}
	if withPositions {
		c.pos = make(map[string]position, 32)
	}
	return c
}

// aliasBudget is how many nodes alias expansion may add to the documents of
// a file: as many as are written in them, plus aliasSlack.
func aliasBudget(docs []*yaml.Node) *int {
	n := aliasSlack
	for _, d := range docs {
		n += countNodes(d)
	}
	return &n
}

// countNodes counts the nodes written in a tree, not following aliases.
func countNodes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	total := 1
	for _, c := range n.Content {
		total += countNodes(c)
	}
	return total
}

func (c *converter) problem(p position, path, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: c.file, Line: p.line, Column: p.col, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (c *converter) fail(p position, path, format string, args ...any) {
	c.problem(p, path, format, args...)
	c.fatal = true
}

func (c *converter) record(path string, at position) {
	if c.pos != nil {
		c.pos[path] = at
	}
}

func nodePos(n *yaml.Node) position { return position{n.Line, n.Column} }

// convert converts n, found at the JSON pointer path. at is the position that
// stands for n in the file: n's own, or that of the alias that brought n in.
// expanding is true inside an alias expansion, where every node spends budget.
func (c *converter) convert(n *yaml.Node, path string, at position, depth int, expanding bool) any {
	if c.fatal {
		return nil
	}
	if depth > c.maxDepth {
		c.fail(at, path, "nesting is deeper than %d levels", c.maxDepth)
		return nil
	}
	if expanding {
		*c.budget--
		if *c.budget < 0 {
			c.fail(at, path, "%s", aliasBombMessage)
			return nil
		}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return c.convert(n.Content[0], path, nodePos(n.Content[0]), depth, expanding)
	case yaml.AliasNode:
		return c.alias(n, path, at, depth)
	case yaml.MappingNode:
		return c.mapping(n, path, at, depth, expanding)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			p := path + "/" + strconv.Itoa(i)
			ip := at
			if !expanding {
				ip = nodePos(item)
				c.record(p, ip)
			}
			list = append(list, c.convert(item, p, ip, depth+1, expanding))
		}
		return list
	case yaml.ScalarNode:
		return c.scalar(n, path, at)
	}
	c.problem(at, path, "unsupported YAML node")
	return nil
}

// alias converts the node an alias refers to. Each anchor is converted once
// and its value shared by every alias of it; each use still spends the
// anchor's size from the budget and must fit under the depth limit, because
// validation and encoding walk the expanded value.
func (c *converter) alias(n *yaml.Node, path string, at position, depth int) any {
	target := n.Alias
	if target == nil {
		c.fail(at, path, "alias *%s refers to no anchor", n.Value)
		return nil
	}
	for _, a := range c.active {
		if a == target {
			c.fail(at, path, "alias *%s is inside its own anchor", n.Value)
			return nil
		}
	}
	if e, ok := c.memo[target]; ok {
		*c.budget -= e.size
		switch {
		case *c.budget < 0:
			c.fail(at, path, "%s", aliasBombMessage)
			return nil
		case depth+e.height > c.maxDepth:
			c.fail(at, path, "nesting is deeper than %d levels", c.maxDepth)
			return nil
		}
		return e.value
	}
	c.active = append(c.active, target)
	before := *c.budget
	v := c.convert(target, path, at, depth, true)
	c.active = c.active[:len(c.active)-1]
	if c.memo == nil {
		c.memo = make(map[*yaml.Node]expansion)
	}
	c.memo[target] = expansion{value: v, size: before - *c.budget, height: valueHeight(v)}
	return v
}

// expansion is the converted value of an anchor, shared by its aliases.
type expansion struct {
	value  any
	size   int // nodes in the expanded value
	height int // levels of nesting below the value itself
}

func valueHeight(v any) int {
	h := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			h = max(h, 1+valueHeight(e))
		}
	case []any:
		for _, e := range x {
			h = max(h, 1+valueHeight(e))
		}
	}
	return h
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

func (c *converter) mapping(n *yaml.Node, path string, at position, depth int, expanding bool) any {
	m := make(map[string]any, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			merges = append(merges, v)
			continue
		}
		kp := at
		if !expanding {
			kp = nodePos(k)
		}
		key, ok := c.key(k, path, kp)
		if !ok {
			continue
		}
		p := path + "/" + escapeToken(key)
		if _, dup := m[key]; dup {
			first := ""
			if c.pos != nil {
				if fp, ok := c.pos[p]; ok && fp.line > 0 {
					first = fmt.Sprintf(" (first at line %d)", fp.line)
				}
			}
			c.problem(kp, p, "duplicate key %q%s", key, first)
			continue
		}
		if !expanding {
			c.record(p, kp)
		}
		m[key] = c.convert(v, p, kp, depth+1, expanding)
	}
	for _, mv := range merges {
		c.merge(m, mv, path, at, depth, expanding)
	}
	return m
}

// merge applies a merge key ("<<: *base" or "<<: [*a, *b]"): keys of the
// merged mappings that the mapping does not set itself are added, the first
// mapping in a list winning over later ones. Added keys are placed at the
// merge key's value.
func (c *converter) merge(m map[string]any, v *yaml.Node, path string, at position, depth int, expanding bool) {
	if c.fatal {
		return
	}
	mp := at
	if !expanding {
		mp = nodePos(v)
	}
	var sources []*yaml.Node
	if v.Kind == yaml.SequenceNode {
		sources = v.Content
	} else {
		sources = []*yaml.Node{v}
	}
	for _, s := range sources {
		val := c.convert(s, path, mp, depth, true)
		if c.fatal {
			return
		}
		sub, ok := val.(map[string]any)
		if !ok {
			c.problem(mp, path, "a merge key (<<) needs a mapping or a list of mappings")
			return
		}
		for k, x := range sub {
			if _, set := m[k]; !set {
				m[k] = x
				if !expanding {
					c.record(path+"/"+escapeToken(k), mp)
				}
			}
		}
	}
}

// key returns a mapping key as a string. JSON keys are strings, so a key
// that is a mapping or a list is a problem.
func (c *converter) key(k *yaml.Node, path string, at position) (string, bool) {
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		*c.budget--
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		c.problem(at, path, "a mapping key must be a plain string, not a %s", nodeKindName(k))
		return "", false
	}
	return k.Value, true
}

func nodeKindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

func (c *converter) scalar(n *yaml.Node, path string, at position) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.problem(at, path, "%q is not a boolean", n.Value)
			return nil
		}
		return b
	case "!!int":
		var v any
		if err := n.Decode(&v); err != nil {
			c.problem(at, path, "%q is not an integer", n.Value)
			return nil
		}
		switch v.(type) {
		case int, int64, uint64, float64:
			return v
		}
		c.problem(at, path, "%q is not an integer", n.Value)
		return nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			c.problem(at, path, "%q is not a number", n.Value)
			return nil
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			c.problem(at, path, "%s is not a finite number", n.Value)
			return nil
		}
		return f
	}
	return n.Value
}
