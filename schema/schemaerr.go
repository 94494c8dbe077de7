package schema

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// patternMeanings says in words what each pattern of the schemas demands.
var patternMeanings = map[string]string{
	`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`:                       "is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit",
	`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`: `is not a version of the form x.y.z (for example "1.34.1"; a leading "v" is allowed)`,
}

// serverFields are metadata fields that only the server sets.
var serverFields = []string{"uid", "resourceVersion", "createdAt", "updatedAt", "deletionTimestamp", "finalizers"}

// schemaProblems turns a JSON Schema validation error into problems that
// name the offending key and say what is wrong in words.
func schemaProblems(d *document, ks *kindSchema, obj map[string]any, err error) []Problem {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{d.problem("", "%v", err)}
	}
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	var problems []Problem
	for _, leaf := range leaves {
		problems = append(problems, leafProblems(d, ks, obj, leaf)...)
	}
	return problems
}

func leafProblems(d *document, ks *kindSchema, obj map[string]any, e *jsonschema.ValidationError) []Problem {
	inst := instancePointer(e.InstanceLocation)
	keyword, node := schemaNodeAt(ks.raw, e.KeywordLocation)
	value := lookup(obj, inst)
	switch keyword {
	case "type":
		msg := fmt.Sprintf("must be %s, not %s", typeWords(node["type"]), valueWords(value))
		switch value.(type) {
		case bool, int, int64, uint64, float64:
			if isOneOf("string", typeList(node["type"])) {
				msg += " (YAML reads this value as a " + jsonKind(value) + "; put it in quotes)"
			}
		}
		return []Problem{d.problem(inst, "%s", msg)}
	case "required":
		m, _ := value.(map[string]any)
		var out []Problem
		for _, name := range stringList(node["required"]) {
			if _, ok := m[name]; ok {
				continue
			}
			p := d.problem(inst, "missing required field %q", name)
			if inst == "/metadata/labels" {
				p.Message = fmt.Sprintf("missing label %q", name)
				if name == LabelTenant {
					p.Message += ": it names the tenant this object belongs to"
				}
			}
			p.Path = inst + "/" + escapeToken(name)
			out = append(out, p)
		}
		return out
	case "additionalProperties":
		m, _ := value.(map[string]any)
		props, _ := node["properties"].(map[string]any)
		known := make([]string, 0, len(props))
		for k := range props {
			known = append(known, k)
		}
		slices.Sort(known)
		var unknown []string
		for k := range m {
			if _, ok := props[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		slices.Sort(unknown)
		var out []Problem
		for i, k := range unknown {
			path := inst + "/" + escapeToken(k)
			switch {
			case inst == "/metadata" && isOneOf(k, serverFields):
				out = append(out, d.problem(path, "metadata.%s is set by the server and cannot be declared in a manifest", k))
			case inst == "" && k == "status":
				out = append(out, d.problem(path, "status is observed by the server and cannot be declared in a manifest"))
			case i >= maxProblemsPerFile:
				// Beyond what will be shown: spare the suggestions.
				out = append(out, d.problem(path, "unknown field %q", k))
			default:
				out = append(out, d.problem(path, "unknown field %q%s", k, suggestOrList(k, known)))
			}
		}
		return out
	case "enum":
		return []Problem{d.problem(inst, "must be one of %s, not %s", quoteList(node["enum"]), valueWords(value))}
	case "const":
		return []Problem{d.problem(inst, "must be %q, not %s", fmt.Sprint(node["const"]), valueWords(value))}
	case "pattern":
		pattern, _ := node["pattern"].(string)
		if meaning, ok := patternMeanings[pattern]; ok {
			return []Problem{d.problem(inst, "%s %s", valueWords(value), meaning)}
		}
		return []Problem{d.problem(inst, "%s does not match the pattern %s", valueWords(value), pattern)}
	case "minLength", "minProperties":
		return []Problem{d.problem(inst, "must not be empty")}
	case "maxLength":
		s, _ := value.(string)
		return []Problem{d.problem(inst, "must be at most %v characters long, not %d", node["maxLength"], len([]rune(s)))}
	case "minItems":
		if n, _ := node["minItems"].(float64); n == 1 {
			return []Problem{d.problem(inst, "must not be an empty list")}
		}
		return []Problem{d.problem(inst, "must list at least %v items", node["minItems"])}
	case "minimum":
		return []Problem{d.problem(inst, "must be at least %v, not %s", node["minimum"], valueWords(value))}
	case "maximum":
		return []Problem{d.problem(inst, "must be at most %v, not %s", node["maximum"], valueWords(value))}
	}
	return []Problem{d.problem(inst, "%s", e.Message)}
}

// instancePointer turns the validator's instance location, whose tokens are
// also URL-escaped, into a plain RFC 6901 JSON pointer.
func instancePointer(loc string) string {
	if loc == "" || !strings.Contains(loc, "%") {
		return loc
	}
	toks := strings.Split(loc, "/")
	for i, t := range toks {
		if u, err := url.PathUnescape(t); err == nil {
			toks[i] = u
		}
	}
	return strings.Join(toks, "/")
}

// schemaNodeAt follows a keyword location such as
// "/properties/spec/properties/count/minimum" through the raw schema,
// resolving "$ref", and returns the keyword and the schema object that holds
// it.
func schemaNodeAt(root map[string]any, loc string) (string, map[string]any) {
	toks := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	keyword := toks[len(toks)-1]
	var cur any = root
	for _, t := range toks[:len(toks)-1] {
		if u, err := url.PathUnescape(t); err == nil {
			t = u
		}
		t = unescapeToken(t)
		switch x := cur.(type) {
		case map[string]any:
			if t == "$ref" {
				ref, _ := x["$ref"].(string)
				cur = lookup(root, strings.TrimPrefix(ref, "#"))
				continue
			}
			cur = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return keyword, nil
			}
			cur = x[i]
		default:
			return keyword, nil
		}
	}
	node, _ := cur.(map[string]any)
	return keyword, node
}

func stringList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func quoteList(v any) string {
	items := stringList(v)
	for i, s := range items {
		items[i] = strconv.Quote(s)
	}
	return strings.Join(items, ", ")
}

func typeList(t any) []string {
	if s, ok := t.(string); ok {
		return []string{s}
	}
	return stringList(t)
}

func jsonKind(v any) string {
	if _, ok := v.(bool); ok {
		return "boolean"
	}
	return "number"
}

// typeWords names JSON Schema types the way YAML authors think of them.
func typeWords(t any) string {
	names := typeList(t)
	words := make([]string, len(names))
	for i, n := range names {
		words[i] = typeWord(n)
	}
	return strings.Join(words, " or ")
}

func typeWord(t string) string {
	switch t {
	case "string":
		return "a string"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "boolean":
		return "true or false"
	case "object":
		return "a mapping"
	case "array":
		return "a list"
	case "null":
		return "empty"
	}
	return t
}

// valueWords describes a value briefly for a message.
func valueWords(v any) string {
	switch x := v.(type) {
	case nil:
		return "empty"
	case string:
		if len(x) > 60 {
			return strconv.Quote(x[:57] + "...")
		}
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// suggest returns ` (did you mean "x"?)` for the candidate nearest to s, when
// one is near enough to be a likely typo, and "" otherwise.
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d < bestD && d <= max(1, len(c)/3) {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func suggestOrList(s string, known []string) string {
	if hint := suggest(s, known); hint != "" {
		return hint
	}
	if len(known) == 0 {
		return ""
	}
	return " (known fields: " + strings.Join(known, ", ") + ")"
}

// editDistance is the optimal string alignment distance between a and b, in
// bytes: the Levenshtein distance that also counts swapping two neighbours
// as one edit.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 64
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
