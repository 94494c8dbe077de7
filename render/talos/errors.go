package talos

import (
	"errors"
	"strings"
)

// PatchError is the error MachineConfig returns when one of the patches it
// was given cannot be loaded, cannot be applied, or leaves a config that
// Talos rejects. Patch is that patch, as given.
type PatchError struct {
	Patch Patch
	Err   error
}

// Error names the patch and where it is declared:
// `config patch "mtu" (tenants/a.yaml:12): load: ...`.
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
	b.WriteString(e.Err.Error())
	return b.String()
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
