// Package labels parses and matches Kubernetes label selectors, as the
// API's labelSelector parameter and rezusctl's -l flag take them:
//
//	key=value  key==value  key!=value
//	key in (a,b)  key notin (a,b)
//	key  !key
//	key>1  key<10
//
// Requirements are separated by commas and must all hold. Parse accepts
// exactly the selectors that k8s.io/apimachinery/pkg/labels.Parse accepts,
// with the same meaning (a differential fuzz test holds the two together),
// but for one: a NUL byte, which Kubernetes reads as the end of the
// selector, is refused here. It imports nothing of the project.
package labels

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
	// GreaterThan and LessThan hold when the label exists, reads as a
	// decimal 64-bit integer, and is greater (less) than the value.
	GreaterThan Operator = ">"
	LessThan    Operator = "<"
)

// Requirement is one condition of a selector. Values are sorted and
// unique; Exists and DoesNotExist have none, the others at least one.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Selector is a parsed selector: every requirement must hold. The empty
// selector matches everything.
type Selector []Requirement

// Kubernetes' syntax of label keys and values.
var (
	nameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// exactOps are the operators that take one value.
var exactOps = map[string]Operator{"=": Equals, "==": Equals, "!=": NotEquals, ">": GreaterThan, "<": LessThan}

const (
	maxName   = 63  // a key's name part, and a value
	maxPrefix = 253 // a key's DNS subdomain prefix
)

// Parse reads a selector. Its errors quote the selector and say where in
// it the mistake is.
func Parse(s string) (Selector, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, fmt.Errorf("label selector %q: a NUL byte at offset %d", s, i)
	}
	p := parser{toks: lex(s)}
	sel, err := p.selector()
	if err != nil {
		return nil, fmt.Errorf("label selector %q: %w", s, err)
	}
	return sel, nil
}

// token is a word (a key, a value, or in and notin), a symbol, or the end
// (text "").
type token struct {
	text string
	word bool
	pos  int
}

func (t token) end() bool { return t.text == "" }

func (t token) is(sym string) bool { return !t.word && t.text == sym }

func (t token) String() string {
	if t.end() {
		return "the end"
	}
	return strconv.Quote(t.text)
}

// lex splits s as Kubernetes does: blanks are space, tab, CR and LF;
// symbols are = ! ( ) , > < and the pairs == and !=; a word is a run of
// anything else, bytes outside ASCII included.
func lex(s string) []token {
	var toks []token
	for i := 0; ; {
		for i < len(s) && isBlank(s[i]) {
			i++
		}
		if i == len(s) {
			return append(toks, token{pos: i})
		}
		start := i
		if isSymbol(s[i]) {
			i++
			if i < len(s) && s[i] == '=' && (s[start] == '=' || s[start] == '!') {
				i++
			}
			toks = append(toks, token{text: s[start:i], pos: start})
			continue
		}
		for i < len(s) && !isSymbol(s[i]) && !isBlank(s[i]) {
			i++
		}
		toks = append(toks, token{text: s[start:i], word: true, pos: start})
	}
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isSymbol(c byte) bool { return strings.IndexByte("=!(),<>", c) >= 0 }

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if !t.end() {
		p.i++
	}
	return t
}

func (p *parser) selector() (Selector, error) {
	if p.peek().end() {
		return nil, nil
	}
	var sel Selector
	for {
		if t := p.peek(); t.end() || t.is(",") {
			return nil, fmt.Errorf("empty requirement at offset %d", t.pos)
		}
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		sel = append(sel, r)
		switch t := p.next(); {
		case t.end():
			return sel, nil
		case !t.is(","):
			return nil, fmt.Errorf("at offset %d: %s after requirement %q, want ',' or the end", t.pos, t, r.Key)
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	t := p.next()
	neg := t.is("!")
	if neg {
		t = p.next()
	}
	if !t.word {
		return Requirement{}, fmt.Errorf("at offset %d: %s, want a label key", t.pos, t)
	}
	r := Requirement{Key: t.text}
	if err := checkKey(r.Key); err != nil {
		return Requirement{}, err
	}
	if after := p.peek(); neg || after.end() || after.is(",") {
		r.Operator = Exists
		if neg {
			r.Operator = DoesNotExist
		}
		return r, nil
	}
	op := p.next()
	switch {
	case op.word && (op.text == "in" || op.text == "notin"):
		r.Operator = Operator(op.text)
		vals, err := p.valueSet(r.Operator)
		if err != nil {
			return Requirement{}, err
		}
		r.Values = vals
	case !op.word && exactOps[op.text] != "":
		r.Operator = exactOps[op.text]
		v, err := p.exactValue(r)
		if err != nil {
			return Requirement{}, err
		}
		r.Values = []string{v}
	default:
		return Requirement{}, fmt.Errorf("at offset %d: %s after key %q, want an operator (=, ==, !=, in, notin, >, <), ',' or the end", op.pos, op, r.Key)
	}
	return r, nil
}

// exactValue reads the value after =, ==, !=, > or <; none is "".
func (p *parser) exactValue(r Requirement) (string, error) {
	v := ""
	if t := p.peek(); !t.end() && !t.is(",") {
		p.next()
		if !t.word {
			return "", fmt.Errorf("at offset %d: %s after %q %s, want a value", t.pos, t, r.Key, r.Operator)
		}
		v = t.text
	}
	if err := checkValue(v); err != nil {
		return "", err
	}
	if r.Operator == GreaterThan || r.Operator == LessThan {
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return "", fmt.Errorf("%q %s %q: the value must be a whole number", r.Key, r.Operator, v)
		}
	}
	return v, nil
}

// valueSet reads "(a,b)" after in or notin, as Kubernetes does: an empty
// element, as in "()", "(a,)" or "(a,,b)", is the value "".
func (p *parser) valueSet(op Operator) ([]string, error) {
	if t := p.next(); !t.is("(") {
		return nil, fmt.Errorf("at offset %d: %s after %s, want a parenthesised list of values, like (a,b)", t.pos, t, op)
	}
	var vals []string
	if p.peek().is(")") {
		p.next()
		return []string{""}, nil
	}
	for {
		t := p.next()
		switch {
		case t.word:
			vals = append(vals, t.text)
			if after := p.peek(); !after.is(",") && !after.is(")") {
				return nil, fmt.Errorf("at offset %d: %s in the values of %s, want ',' or ')'", after.pos, after, op)
			}
		case t.is(","):
			if len(vals) == 0 || p.peek().is(",") || p.peek().is(")") {
				vals = append(vals, "")
			}
		case t.is(")"):
			slices.Sort(vals)
			vals = slices.Compact(vals)
			for _, v := range vals {
				if err := checkValue(v); err != nil {
					return nil, err
				}
			}
			return vals, nil
		default:
			return nil, fmt.Errorf("at offset %d: %s in the values of %s, want a value, ',' or ')'", t.pos, t, op)
		}
	}
}

// checkKey checks a label key as Kubernetes does: a name of at most 63
// characters, with an optional prefix of a DNS subdomain of at most 253
// and a "/".
func checkKey(k string) error {
	prefix, name, slash := strings.Cut(k, "/")
	if !slash {
		prefix, name = "", k
	}
	switch {
	case strings.Contains(name, "/"):
		return fmt.Errorf("%q is not a valid label key: more than one '/'", k)
	case slash && (prefix == "" || len(prefix) > maxPrefix || !subdomainRE.MatchString(prefix)):
		return fmt.Errorf("%q is not a valid label key: its prefix must be a DNS subdomain (lower case letters, digits, '-' and '.') of at most %d characters", k, maxPrefix)
	case name == "" || len(name) > maxName || !nameRE.MatchString(name):
		return fmt.Errorf("%q is not a valid label key: its name must be at most %d letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k, maxName)
	}
	return nil
}

// checkValue checks a label value as Kubernetes does: empty, or at most 63
// letters, digits, '-', '_' or '.', starting and ending with a letter or
// digit.
func checkValue(v string) error {
	if v != "" && (len(v) > maxName || !nameRE.MatchString(v)) {
		return fmt.Errorf("%q is not a valid label value: at most %d letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v, maxName)
	}
	return nil
}

// Matches reports whether labels satisfy every requirement.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Matches reports whether labels satisfy the requirement.
func (r Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	case GreaterThan, LessThan:
		if !ok || len(r.Values) != 1 {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		m, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err != nil || err2 != nil {
			return false
		}
		return (r.Operator == GreaterThan && n > m) || (r.Operator == LessThan && n < m)
	}
	return false
}
