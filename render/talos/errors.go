package talos

import (
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// PatchError is the error MachineConfig returns when one of the patches it
// was given cannot be loaded, cannot be applied, or leaves a config that
// Talos rejects. Patch is that patch, as given.
type PatchError struct {
	Patch Patch
	Err   error
}

// Error names the patch and where it is declared:
// `config patch "mtu" (tenants/a.yaml:12): load: ...`. The error of a
// patch whose text was encrypted in git tells none of its values: each
// reads schema.EncryptedValue.
func (e *PatchError) Error() string {
	var b strings.Builder
	b.WriteString("config patch ")
	b.WriteString(quote(e.Patch.Name))
	if e.Patch.Source != "" {
		b.WriteString(" (")
		b.WriteString(e.Patch.Source)
		b.WriteString(")")
	}
	b.WriteString(": ")
	if e.Patch.Encrypted {
		b.WriteString(withoutValues(e.Err.Error(), e.Patch.Patch))
	} else {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// quotedString matches a double-quoted string in a message.
var quotedString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// withoutValues returns msg with the values of the patch text left out: a
// quoted string that a value holds, and a value of four bytes or more
// written out (the validators quote config snippets), read
// schema.EncryptedValue. Keys stay, so that the message still says where.
// A text that is not YAML has its whole text as its one value.
func withoutValues(msg, patch string) string {
	values := scalarValues(patch)
	msg = quotedString.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil || s == "" {
			return q
		}
		for _, v := range values {
			if strings.Contains(v, s) {
				return schema.EncryptedValue
			}
		}
		return q
	})
	for _, v := range values {
		if len(v) >= 4 {
			msg = strings.ReplaceAll(msg, v, schema.EncryptedValue)
		}
	}
	return msg
}

// scalarValues returns the scalar values (not the keys) of a YAML text,
// longest first, or the text itself when it is not YAML.
func scalarValues(text string) []string {
	var values []string
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if depth > 200 {
			return
		}
		switch n.Kind {
		case yaml.ScalarNode:
			values = append(values, n.Value)
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i], depth+1)
			}
		default:
			for _, c := range n.Content {
				walk(c, depth+1)
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if err.Error() != "EOF" {
				values = append(values, text)
			}
			break
		}
		walk(&n, 0)
	}
	slices.SortStableFunc(values, func(a, b string) int { return len(b) - len(a) })
	return values
}

// Unwrap returns the underlying error.
func (e *PatchError) Unwrap() error { return e.Err }

func quote(s string) string { return `"` + s + `"` }

// flattenError turns the nested multi-line error lists that the Talos
// validator returns ("2 errors occurred:\n\t* ...") into one line of
// "; "-separated messages, each keeping the prefix that says which document
// failed, such as "v1alpha1.Config: ...".
func flattenError(err error) string {
	msgs := errorMessages(err)
	if len(msgs) == 0 {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	return strings.Join(msgs, "; ")
}

func errorMessages(err error) []string {
	if list := errorList(err); list != nil {
		var msgs []string
		for _, e := range list {
			if e != nil {
				msgs = append(msgs, errorMessages(e)...)
			}
		}
		return msgs
	}
	if inner := errors.Unwrap(err); inner != nil && errorList(inner) != nil {
		prefix, ok := strings.CutSuffix(err.Error(), inner.Error())
		if ok {
			msgs := errorMessages(inner)
			for i := range msgs {
				msgs[i] = prefix + msgs[i]
			}
			return msgs
		}
	}
	return []string{strings.Join(strings.Fields(err.Error()), " ")}
}

// errorList returns the errors that err lists, or nil when it is a single
// error: hashicorp/go-multierror's WrappedErrors and errors.Join's Unwrap.
func errorList(err error) []error {
	switch e := err.(type) {
	case interface{ WrappedErrors() []error }:
		return e.WrappedErrors()
	case interface{ Unwrap() []error }:
		return e.Unwrap()
	}
	return nil
}

var errNoRole = errors.New(`role: want "controlplane" or "worker"`)
