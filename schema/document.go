package schema

import (
	"fmt"
	"strconv"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// document is one manifest of our kinds, checked on its own. Its name and
// tenant label are kept even when it has problems, so that checks across
// documents do not report a second, confusing problem for the same mistake.
type document struct {
	kind string
	file string
	line int
	pos  map[string]position

	name   string // metadata.name, when it is a string
	tenant string // the tenant label of a NodeGroup or ConfigPatch, when it is a string

	obj any // *Tenant, *NodeGroup or *ConfigPatch, only when the document has no problem
}

// crossPaths are the keys that the checks across documents (assemble)
// report at, with every ancestor of them, where at falls back to.
var crossPaths = []string{"", "/metadata", "/metadata/name", "/metadata/labels", JSONPointer("metadata", "labels", LabelTenant)}

// keepCrossPositions drops the positions of every key but crossPaths: the
// document's own checks, the only users of the others, are done, and its
// typed object keeps the lines in its Source. Each of 20,000 documents then
// holds a map of at most five keys rather than one of every key.
func (d *document) keepCrossPositions() {
	kept := make(map[string]position, len(crossPaths))
	for _, p := range crossPaths {
		if at, ok := d.pos[p]; ok {
			kept[p] = at
		}
	}
	d.pos = kept
}

// at returns the position of the key at path, or of its nearest ancestor.
func (d *document) at(path string) position {
	for {
		if p, ok := d.pos[path]; ok && p.line > 0 {
			return p
		}
		i := strings.LastIndexByte(path, '/')
		if i < 0 {
			return position{d.line, 0}
		}
		path = path[:i]
	}
}

func (d *document) problem(path, format string, args ...any) Problem {
	p := d.at(path)
	return Problem{File: d.file, Line: p.line, Column: p.col, Path: path, Message: fmt.Sprintf(format, args...)}
}

// where returns "file:line" of the key at path, for messages that point at
// another document.
func (d *document) where(path string) string {
	return fmt.Sprintf("%s:%d", d.file, d.at(path).line)
}

func (d *document) source() Source {
	return newSource(d.file, d.line, d.pos, func(p position) int { return p.line })
}

// declarable and apiOnly are the kinds of rezuscloud.io/v1 (see Kinds).
var (
	declarable = kindNames(true)
	apiOnly    = kindNames(false)
)

func isOneOf(s string, list []string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// loadDocument checks one document, spending the file's alias budget. It
// returns the document when it is of our kinds (with obj set when it has no
// problem), its problems, and whether it was skipped as belonging to another
// apiVersion.
func (l *loader) loadDocument(file string, n *yaml.Node, budget *int, sd *sopsDoc) (*document, []Problem, bool) {
	d, problems, skipped := l.checkDocument(file, n, budget, sd)
	return d, sd.told(problems), skipped
}

// checkDocument is loadDocument, before the problems of a document with
// encrypted values are told without them.
func (l *loader) checkDocument(file string, n *yaml.Node, budget *int, sd *sopsDoc) (*document, []Problem, bool) {
	root := n
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	start := nodePos(root)
	at := func(p position, path, format string, args ...any) []Problem {
		return []Problem{{File: file, Line: p.line, Column: p.col, Path: path, Message: fmt.Sprintf(format, args...)}}
	}
	if root.Kind != yaml.MappingNode {
		return nil, at(start, "", "document is a %s; a manifest is a mapping with apiVersion, kind, metadata and spec", describeNode(root)), false
	}

	apiVersion, avPos, avOK, avFound := stringField(root, "apiVersion")
	kind, kindPos, kindOK, kindFound := stringField(root, "kind")
	switch {
	case !avFound:
		return nil, at(start, "/apiVersion", "missing apiVersion: every document under the manifest path needs apiVersion and kind (%s for RezusCloud manifests)", APIVersion), false
	case !avOK:
		return nil, at(avPos, "/apiVersion", "apiVersion must be a string such as %q", APIVersion), false
	case apiVersion == APIVersion:
		switch {
		case !kindFound:
			return nil, at(start, "/kind", "missing kind: expected one of %s", strings.Join(declarable, ", ")), false
		case !kindOK:
			return nil, at(kindPos, "/kind", "kind must be a string: one of %s", strings.Join(declarable, ", ")), false
		case isOneOf(kind, apiOnly):
			return nil, at(kindPos, "/kind", "kind %s is served by the API and cannot be declared in a manifest", kind), false
		case !isOneOf(kind, declarable):
			return nil, at(kindPos, "/kind", "unknown kind %q for %s: expected one of %s%s", kind, APIVersion, strings.Join(declarable, ", "), suggest(kind, declarable)), false
		}
	case isOurGroup(apiVersion):
		return nil, at(avPos, "/apiVersion", "unknown apiVersion %q: this version of RezusCloud reads %s", apiVersion, APIVersion), false
	case kindOK && isOneOf(kind, declarable):
		return nil, at(avPos, "/apiVersion", "kind %s belongs to apiVersion %s, not %q", kind, APIVersion, apiVersion), false
	default:
		return nil, nil, true
	}

	conv := newConverter(file, l.opts.MaxDepth, budget, true)
	conv.record("", start)
	value := conv.convert(root, "", start, 0, false)
	problems := conv.problems
	d := &document{kind: kind, file: file, line: start.line, pos: conv.pos}
	// Once its own checks are done, the document is kept (in the cache,
	// too) only for the checks across documents.
	defer d.keepCrossPositions()
	if conv.fatal {
		// The value is incomplete; take the name and tenant from the node
		// tree, so that checks across documents stay quiet about them.
		d.name = nodeString(root, "metadata", "name")
		if kind != KindTenant {
			d.tenant = nodeString(root, "metadata", "labels", LabelTenant)
		}
		return d, problems, false
	}
	obj, _ := value.(map[string]any)
	sd.hide(obj)
	d.name, _ = lookup(obj, "/metadata/name").(string)
	if kind != KindTenant {
		d.tenant, _ = lookup(obj, JSONPointer("metadata", "labels", LabelTenant)).(string)
	}

	ks := l.kinds[kind]
	if err := ks.compiled.Validate(obj); err != nil {
		// A value the converter already rejected (say, .inf) reaches the
		// schema as null; report it once.
		rejected := make(map[string]bool, len(problems))
		for _, p := range problems {
			rejected[p.Path] = true
		}
		for _, p := range schemaProblems(d, ks, obj, err) {
			if !rejected[p.Path] {
				problems = append(problems, p)
			}
		}
	}
	problems = sd.told(append(problems, checkDocument(d, obj, l.patches.check)...))
	if len(problems) > 0 {
		return d, problems, false
	}
	typed, err := decodeKind(kind, obj)
	if err != nil {
		return d, []Problem{d.problem("", "cannot decode %s: %v", kind, err)}, false
	}
	canonicalize(typed)
	src := d.source()
	src.Encrypted = sd.secretPointers()
	switch t := typed.(type) {
	case *Tenant:
		t.Source = src
	case *NodeGroup:
		t.Source = src
	case *ConfigPatch:
		t.Source = src
	}
	d.obj = typed
	return d, nil, false
}

func isOurGroup(apiVersion string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	return strings.EqualFold(group, Group)
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "string"
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "boolean"
		case "!!null":
			return "null"
		}
		return "scalar"
	}
	return "mapping"
}

// stringField finds key in the mapping m and returns its value, where the
// value sits, whether it is a string, and whether the key is present.
func stringField(m *yaml.Node, key string) (string, position, bool, bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != key {
			continue
		}
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return "", nodePos(v), false, true
		}
		return v.Value, nodePos(v), true, true
	}
	return "", position{}, false, false
}

// nodeString follows keys through nested mappings of a node tree and returns
// the string at the end, or "".
func nodeString(n *yaml.Node, keys ...string) string {
	for _, key := range keys {
		if n.Kind != yaml.MappingNode {
			return ""
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			return ""
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return ""
	}
	return n.Value
}

// lookup returns the value at a JSON pointer in a decoded document, or nil.
func lookup(v any, ptr string) any {
	if ptr == "" {
		return v
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescapeToken(tok)
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func unescapeToken(t string) string {
	if !strings.Contains(t, "~") {
		return t
	}
	t = strings.ReplaceAll(t, "~1", "/")
	return strings.ReplaceAll(t, "~0", "~")
}
