package talos

import (
	"net/url"
	"reflect"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// replacer replaces each of from by its counterpart.
type replacer struct {
	from []string
	r    *strings.Replacer
}

func newReplacer(from, to []string) *replacer {
	pairs := make([]string, 0, 2*len(from))
	for i := range from {
		pairs = append(pairs, from[i], to[i])
	}
	return &replacer{from: from, r: strings.NewReplacer(pairs...)}
}

// replace is strings.Replacer's Replace, without its copy of a string
// that holds none of from (most strings of a config).
func (r *replacer) replace(s string) string {
	for _, f := range r.from {
		if strings.Contains(s, f) {
			return r.r.Replace(s)
		}
	}
	return s
}

// maxDepth bounds how deep replaceStrings goes into a config.
const maxDepth = 64

var (
	urlType = reflect.TypeFor[url.URL]()
	// endpointType encodes as its URL's text and decodes with url.Parse.
	endpointType = reflect.TypeFor[v1alpha1.Endpoint]()
)

// replaceStrings returns v with r applied to every string it holds; changed
// says whether anything was replaced. v itself is never written: a changed
// pointer, slice, map or struct is a new copy, and what did not change is
// shared. ok is false where a replacement cannot be shown to survive a
// YAML round trip as it does in v: a string in an unexported field or a map
// key, inside a type that encodes or decodes itself (other than a URL,
// which must parse back from its text to itself), or too deep a value.
func replaceStrings(v reflect.Value, r *replacer, depth int) (out reflect.Value, changed, ok bool) {
	if depth > maxDepth {
		return v, false, false
	}
	out, changed, ok = replaceKind(v, r, depth)
	if !ok || !changed {
		return v, false, ok
	}
	if v.Type() == urlType {
		u := out.Interface().(url.URL)
		back, err := url.Parse(u.String())
		return out, true, err == nil && reflect.DeepEqual(*back, u)
	}
	return out, true, !codesItself(v.Type())
}

func replaceKind(v reflect.Value, r *replacer, depth int) (reflect.Value, bool, bool) {
	switch v.Kind() {
	case reflect.String:
		s := r.replace(v.String())
		if s == v.String() {
			return v, false, true
		}
		n := reflect.New(v.Type()).Elem()
		n.SetString(s)
		return n, true, v.CanInterface()
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return v, false, true
		}
		e, changed, ok := replaceStrings(v.Elem(), r, depth+1)
		if !changed || !ok {
			return v, false, ok
		}
		if v.Kind() == reflect.Interface {
			n := reflect.New(v.Type()).Elem()
			n.Set(e)
			return n, true, v.CanInterface()
		}
		p := reflect.New(e.Type())
		p.Elem().Set(e)
		return p, true, v.CanInterface()
	case reflect.Struct:
		return replaceStruct(v, r, depth)
	case reflect.Slice, reflect.Array:
		if holdsNoString(v.Type().Elem()) {
			return v, false, true
		}
		return replaceList(v, r, depth)
	case reflect.Map:
		return replaceMap(v, r, depth)
	}
	return v, false, true
}

func replaceStruct(v reflect.Value, r *replacer, depth int) (reflect.Value, bool, bool) {
	var n reflect.Value
	for i := range v.NumField() {
		f, changed, ok := replaceStrings(v.Field(i), r, depth+1)
		if !ok {
			return v, false, false
		}
		if !changed {
			continue
		}
		if !v.Type().Field(i).IsExported() || !v.CanInterface() {
			return v, false, false
		}
		if !n.IsValid() {
			n = reflect.New(v.Type()).Elem()
			n.Set(v)
		}
		n.Field(i).Set(f)
	}
	if !n.IsValid() {
		return v, false, true
	}
	return n, true, true
}

func replaceList(v reflect.Value, r *replacer, depth int) (reflect.Value, bool, bool) {
	var n reflect.Value
	for i := range v.Len() {
		e, changed, ok := replaceStrings(v.Index(i), r, depth+1)
		if !ok {
			return v, false, false
		}
		if !changed {
			continue
		}
		if !v.CanInterface() {
			return v, false, false
		}
		if !n.IsValid() {
			if v.Kind() == reflect.Array {
				n = reflect.New(v.Type()).Elem()
			} else {
				n = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			}
			reflect.Copy(n, v)
		}
		n.Index(i).Set(e)
	}
	if !n.IsValid() {
		return v, false, true
	}
	return n, true, true
}

func replaceMap(v reflect.Value, r *replacer, depth int) (reflect.Value, bool, bool) {
	var n reflect.Value
	iter := v.MapRange()
	for iter.Next() {
		if _, changed, ok := replaceStrings(iter.Key(), r, depth+1); changed || !ok {
			return v, false, false
		}
		e, changed, ok := replaceStrings(iter.Value(), r, depth+1)
		if !ok {
			return v, false, false
		}
		if !changed {
			continue
		}
		if !v.CanInterface() {
			return v, false, false
		}
		if !n.IsValid() {
			n = reflect.MakeMapWithSize(v.Type(), v.Len())
			copyIter := v.MapRange()
			for copyIter.Next() {
				n.SetMapIndex(copyIter.Key(), copyIter.Value())
			}
		}
		n.SetMapIndex(iter.Key(), e)
	}
	if !n.IsValid() {
		return v, false, true
	}
	return n, true, true
}

// codesItself reports whether values of t encode or decode themselves in
// YAML or as text, so that a string inside may not be its own scalar.
func codesItself(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == endpointType {
		return false
	}
	for _, name := range []string{"MarshalYAML", "UnmarshalYAML", "MarshalText", "UnmarshalText"} {
		if _, ok := t.MethodByName(name); ok {
			return true
		}
		if _, ok := reflect.PointerTo(t).MethodByName(name); ok {
			return true
		}
	}
	return false
}

// holdsNoString reports whether values of t are plain numbers or booleans.
func holdsNoString(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	}
	return false
}
