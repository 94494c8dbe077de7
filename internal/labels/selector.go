// Package labels parses and matches Kubernetes-style label selectors, as
// the API's labelSelector parameter and rezusctl's -l flag take them:
//
//	key=value  key==value  key!=value
//	key in (a,b)  key notin (a,b)
//	key  !key
//
// Requirements are separated by commas and must all hold.
package labels

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Operator is how a requirement compares a label.
type Operator string

// The operators of a selector.
const (
	Equals       Operator = "="
	NotEquals    Operator = "!="
	In           Operator = "in"
	NotIn        Operator = "notin"
	Exists       Operator = "exists"
	DoesNotExist Operator = "!"
)

// Requirement is one condition of a selector.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Selector is a parsed selector: every requirement must hold. The empty
// selector matches everything.
type Selector []Requirement

var (
	keyRE   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	valueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// Parse reads a selector. Its errors name the offending requirement.
func Parse(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var sel Selector
	for _, part := range splitRequirements(s) {
		req, err := parseRequirement(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("label selector %q: %w", s, err)
		}
		sel = append(sel, req)
	}
	return sel, nil
}

// splitRequirements splits on commas outside parentheses.
func splitRequirements(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func parseRequirement(p string) (Requirement, error) {
	if p == "" {
		return Requirement{}, fmt.Errorf("empty requirement")
	}
	if strings.HasPrefix(p, "!") {
		key := strings.TrimSpace(p[1:])
		if err := checkKey(key); err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: key, Operator: DoesNotExist}, nil
	}
	for _, op := range []string{"!=", "==", "="} {
		if i := strings.Index(p, op); i >= 0 {
			key, val := strings.TrimSpace(p[:i]), strings.TrimSpace(p[i+len(op):])
			if err := checkKey(key); err != nil {
				return Requirement{}, err
			}
			if err := checkValue(val); err != nil {
				return Requirement{}, err
			}
			o := Equals
			if op == "!=" {
				o = NotEquals
			}
			return Requirement{Key: key, Operator: o, Values: []string{val}}, nil
		}
	}
	fields := strings.Fields(p)
	if len(fields) >= 2 && (fields[1] == "in" || fields[1] == "notin" || strings.HasPrefix(fields[1], "in(") || strings.HasPrefix(fields[1], "notin(")) {
		key := fields[0]
		rest := strings.TrimSpace(p[len(key):])
		op := In
		if strings.HasPrefix(rest, "notin") {
			op, rest = NotIn, strings.TrimSpace(rest[len("notin"):])
		} else {
			rest = strings.TrimSpace(rest[len("in"):])
		}
		if err := checkKey(key); err != nil {
			return Requirement{}, err
		}
		if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
			return Requirement{}, fmt.Errorf("%q: %s needs a parenthesised list of values, like (a,b)", p, op)
		}
		var vals []string
		for _, v := range strings.Split(rest[1:len(rest)-1], ",") {
			v = strings.TrimSpace(v)
			if err := checkValue(v); err != nil {
				return Requirement{}, err
			}
			vals = append(vals, v)
		}
		sort.Strings(vals)
		return Requirement{Key: key, Operator: op, Values: vals}, nil
	}
	if len(fields) == 1 {
		if err := checkKey(p); err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: p, Operator: Exists}, nil
	}
	return Requirement{}, fmt.Errorf("%q is not a requirement: use key=value, key!=value, key in (a,b), key notin (a,b), key or !key", p)
}

func checkKey(k string) error {
	if len(k) > 316 || !keyRE.MatchString(k) {
		return fmt.Errorf("%q is not a valid label key", k)
	}
	return nil
}

func checkValue(v string) error {
	if len(v) > 63 || !valueRE.MatchString(v) {
		return fmt.Errorf("%q is not a valid label value", v)
	}
	return nil
}

// Matches reports whether labels satisfy every requirement.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.Key]
		switch r.Operator {
		case Equals:
			if !ok || v != r.Values[0] {
				return false
			}
		case NotEquals:
			if ok && v == r.Values[0] {
				return false
			}
		case In:
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case NotIn:
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case Exists:
			if !ok {
				return false
			}
		case DoesNotExist:
			if ok {
				return false
			}
		}
	}
	return true
}
