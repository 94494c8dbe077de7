package notify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// decoder reads the config's YAML node tree field by field, so that every
// mistake is reported with its line and its path in the file. It collects
// every problem instead of stopping at the first.
type decoder struct {
	file     string
	problems []problem
}

type problem struct {
	line int
	msg  string
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.problems = append(d.problems, problem{line: line, msg: msg})
}

// err returns every problem found, in the order of their lines, each as
// "file:line: path: message", or nil.
func (d *decoder) err() error {
	if len(d.problems) == 0 {
		return nil
	}
	slices.SortStableFunc(d.problems, func(a, b problem) int { return a.line - b.line })
	var b strings.Builder
	for i, p := range d.problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s:%d: %s", d.file, p.line, p.msg)
	}
	return &ConfigError{msg: b.String()}
}

// ConfigError is what LoadConfig returns for a config it refuses: every
// problem found, one a line, each with the file and line.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// fields reads the mapping n, calling the function of each key it holds.
// Unknown and repeated keys are problems; so is a node that is not a
// mapping. It reports whether n was a mapping.
func (d *decoder) fields(n *yaml.Node, path string, fields map[string]func(v *yaml.Node, path string)) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", kindName(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		fn, ok := fields[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			d.errorf(k, path, "a key must be a plain name, got %s", kindName(k))
		case !ok:
			d.errorf(k, path, "unknown field %q (known: %s)", k.Value, strings.Join(sortedKeys(fields), ", "))
		case seen[k.Value]:
			d.errorf(k, path, "field %q given twice", k.Value)
		case v.Kind == yaml.AliasNode:
			d.errorf(v, sub, "aliases are not supported here")
		default:
			seen[k.Value] = true
			fn(v, sub)
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

// str reads a scalar as text; null and non-scalars are problems.
func (d *decoder) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, path, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

// strs reads a list of strings.
func (d *decoder) strs(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", kindName(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		out = append(out, d.str(item, fmt.Sprintf("%s[%d]", path, i)))
	}
	return out
}

// duration reads a Go duration ("30s", "5m"), which must be positive.
func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	s := d.str(n, path)
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.errorf(n, path, "%q is not a positive duration (like 30s or 5m)", s)
		return 0
	}
	return v
}

// integer reads a whole number within [low, high].
func (d *decoder) integer(n *yaml.Node, path string, low, high int) int {
	s := d.str(n, path)
	if s == "" {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < low || v > high {
		d.errorf(n, path, "%q is not a whole number from %d to %d", s, low, high)
		return 0
	}
	return v
}

// list calls fn for each item of the sequence n.
func (d *decoder) list(n *yaml.Node, path string, fn func(item *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		fn(item, fmt.Sprintf("%s[%d]", path, i))
	}
}
