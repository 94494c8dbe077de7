package module

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Kind is the type a providerConfig field takes, as YAML writes it.
type Kind int

// Field kinds.
const (
	String Kind = iota + 1
	Integer
	Number
	Bool
	StringList
	StringMap // a mapping of strings to strings
	Object    // a mapping with Fields
	ObjectList
)

func (k Kind) String() string {
	switch k {
	case String:
		return "a string"
	case Integer:
		return "an integer"
	case Number:
		return "a number"
	case Bool:
		return "true or false"
	case StringList:
		return "a list of strings"
	case StringMap:
		return "a mapping of strings to strings"
	case Object:
		return "a mapping"
	case ObjectList:
		return "a list of mappings"
	}
	return "?"
}

// Field is one field of a providerConfig schema.
type Field struct {
	Name     string
	Kind     Kind
	Required bool
	// Fields are the fields of an Object, or of each item of an
	// ObjectList.
	Fields []Field
	// Short, for an ObjectList, names the field that an item written as a
	// string stands for: with Short "name", the item "tenant-net" is
	// {name: tenant-net}. Items reads such a list.
	Short string
	// Check, when set, is given a value of the right kind and returns what
	// is still wrong with it, or "".
	Check func(v any) string
}

// want says what f takes, for messages.
func (f Field) want() string {
	if f.Kind == ObjectList && f.Short != "" {
		return fmt.Sprintf("a list of mappings, or of strings short for {%s: …}", f.Short)
	}
	return f.Kind.String()
}

// Items returns the items of an ObjectList value v whose field has Short
// short, each a mapping: an item written as a string s is {short: s}.
// Anything else is left out; Checker reports it.
func Items(v any, short string) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		switch x := item.(type) {
		case map[string]any:
			out = append(out, x)
		case string:
			if short != "" {
				out = append(out, map[string]any{short: x})
			}
		}
	}
	return out
}

// Checker collects the problems of one node group's providerConfig, each
// at the file and line of the key it is about.
type Checker struct {
	Class    string // the providerClass, which starts every message
	NG       *schema.NodeGroup
	Problems []schema.Problem
}

// Add reports a problem at the providerConfig key that tokens lead to
// (none for providerConfig itself).
func (c *Checker) Add(tokens []string, format string, args ...any) {
	c.add(tokens, tokens, format, args...)
}

// add reports a problem at the key tokens lead to, naming the field that
// named leads to in the message.
func (c *Checker) add(tokens, named []string, format string, args ...any) {
	path := schema.JSONPointer(append([]string{"spec", "providerConfig"}, tokens...)...)
	c.Problems = append(c.Problems, schema.Problem{
		File: c.NG.Source.File, Line: c.NG.Source.LineOf(path), Column: 1, Path: path,
		Message: fmt.Sprintf("%s providerConfig%s %s", c.Class, display(named), fmt.Sprintf(format, args...)),
	})
}

// Check checks the node group's providerConfig against fields: unknown
// fields, wrong types, missing required fields and each field's own check.
func (c *Checker) Check(fields []Field) {
	c.object(nil, c.NG.Spec.ProviderConfig, fields)
}

func (c *Checker) object(at []string, m map[string]any, fields []Field) {
	known := make([]string, 0, len(fields))
	byName := map[string]Field{}
	for _, f := range fields {
		known = append(known, f.Name)
		byName[f.Name] = f
	}
	sort.Strings(known)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := byName[k]
		if !ok {
			c.add(append(append([]string(nil), at...), k), at, "has no field %q (known: %s)", k, strings.Join(known, ", "))
			continue
		}
		c.value(append(append([]string(nil), at...), k), m[k], f)
	}
	for _, f := range fields {
		if _, ok := m[f.Name]; f.Required && !ok {
			c.Add(at, "needs the field %q", f.Name)
		}
	}
}

func (c *Checker) value(at []string, v any, f Field) {
	if !kindOf(v, f) {
		c.Add(at, "must be %s, not %s", f.want(), describe(v))
		return
	}
	switch f.Kind {
	case Object:
		c.object(at, v.(map[string]any), f.Fields)
	case ObjectList:
		for i, item := range Items(v, f.Short) {
			c.object(append(append([]string(nil), at...), strconv.Itoa(i)), item, f.Fields)
		}
	}
	if f.Check != nil {
		if msg := f.Check(v); msg != "" {
			c.Add(at, "%s", msg)
		}
	}
}

func kindOf(v any, f Field) bool {
	switch f.Kind {
	case String:
		_, ok := v.(string)
		return ok
	case Integer:
		n, ok := v.(float64)
		return ok && n == math.Trunc(n) && math.Abs(n) < 1<<53
	case Number:
		_, ok := v.(float64)
		return ok
	case Bool:
		_, ok := v.(bool)
		return ok
	case StringList:
		l, ok := v.([]any)
		for _, e := range l {
			if _, s := e.(string); !s {
				return false
			}
		}
		return ok
	case StringMap:
		m, ok := v.(map[string]any)
		for _, e := range m {
			if _, s := e.(string); !s {
				return false
			}
		}
		return ok
	case Object:
		_, ok := v.(map[string]any)
		return ok
	case ObjectList:
		l, ok := v.([]any)
		for _, e := range l {
			_, m := e.(map[string]any)
			_, s := e.(string)
			if !m && !(s && f.Short != "") {
				return false
			}
		}
		return ok
	}
	return false
}

// describe names what a YAML value is, for messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case float64:
		return "the number " + strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return "a boolean"
	case []any:
		return describeList(x)
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// describeList names a list by its items: "a list of numbers", or "a list
// whose item 2 is null" when they are not all of one kind.
func describeList(l []any) string {
	if len(l) == 0 {
		return "an empty list"
	}
	for i, e := range l {
		if p := plural(e); p == "" || p != plural(l[0]) {
			return fmt.Sprintf("a list whose item %d is %s", i, describe(e))
		}
	}
	return "a list of " + plural(l[0])
}

// plural names the kind of v in the plural, "" for null.
func plural(v any) string {
	switch v.(type) {
	case string:
		return "strings"
	case float64:
		return "numbers"
	case bool:
		return "booleans"
	case []any:
		return "lists"
	case map[string]any:
		return "mappings"
	}
	return ""
}

// display writes tokens as ".networks[0].name".
func display(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			b.WriteString("[" + t + "]")
			continue
		}
		b.WriteString("." + t)
	}
	return b.String()
}

// Strings returns v as a list of strings (nil when it is not one).
func Strings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Int returns v as an int (0 when it is not a number).
func Int(v any) int {
	n, _ := v.(float64)
	return int(n)
}
