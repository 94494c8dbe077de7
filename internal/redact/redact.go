// Package redact removes secrets from text that the server keeps or shows
// but did not write itself: what tofu and its providers print, and the
// errors made of it. It recognises the forms cluster secrets take in such
// text and replaces them by Mark:
//
//   - PEM blocks, also cut off at either end (a tail of output may start
//     inside one);
//   - the base64 of a PEM block, as Talos configs, talosconfigs and
//     kubeconfigs carry certificates and keys ("LS0tLS1CRUdJTi…");
//   - long base64 runs (64 characters or more, of mixed case and digits),
//     such as a PEM body line or a base64-encoded config;
//   - the base64 of 32 bytes, padded: the Talos cluster ID (URL alphabet)
//     and secret, and the secretbox and AES-CBC encryption secrets;
//   - Talos and Kubernetes bootstrap tokens and trustd tokens,
//     "abcdef.0123456789abcdef";
//   - and values the caller knows to be secret (New).
//
// Ordinary output stays readable: resource addresses, UUIDs and other
// ids, file paths, hex digests such as sha256 sums, and tofu's "h1:"
// checksums of providers.
//
// It owns the recognition of secrets in free text only. What a rendered
// workspace declares sensitive is render's to hide (render.Redact).
package redact

import (
	"regexp"
	"slices"
	"strings"
)

// Mark replaces every secret the package removes.
const Mark = "[redacted]"

// Redactor removes secrets it recognises by their form and the values it
// was given. The zero value and nil recognise forms only.
type Redactor struct {
	known []string // longest first, so that a value inside another goes with it
}

// minKnown is the length under which a given value is not looked for:
// shorter ones would hide ordinary words.
const minKnown = 4

// New returns a Redactor that also removes each of known (values shorter
// than four bytes are ignored).
func New(known ...string) *Redactor {
	r := &Redactor{}
	for _, k := range known {
		if len(k) >= minKnown && !slices.Contains(r.known, k) {
			r.known = append(r.known, k)
		}
	}
	slices.SortStableFunc(r.known, func(a, b string) int { return len(b) - len(a) })
	return r
}

// String returns s with the known values and every secret recognised by
// its form replaced by Mark.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, k := range r.known {
			s = strings.ReplaceAll(s, k, Mark)
		}
	}
	return Text(s)
}

// Text returns s with every secret recognised by its form replaced by
// Mark. Text of its own output returns it unchanged.
func Text(s string) string {
	if strings.Contains(s, "-----BEGIN") {
		s = pemBlockRE.ReplaceAllString(s, Mark)
	}
	if strings.Contains(s, "-----END") {
		s = pemTailRE.ReplaceAllString(s, Mark)
	}
	s = pemBase64RE.ReplaceAllString(s, Mark)
	s = replaceRuns(s, isBase64, longBase64)
	s = replaceRuns(s, isBase64URL, key32)
	return replaceRuns(s, isTokenByte, token)
}

var (
	// pemBlockRE matches a PEM block from its BEGIN line to its END line,
	// or to the end of the text when that is cut off.
	pemBlockRE = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*-----(?s:.*?)(?:-----END [A-Z0-9 ]*-----|\z)`)
	// pemTailRE matches the end of a PEM block whose start was cut off:
	// the base64 lines before an END line (pemBlockRE took every END line
	// that has its BEGIN line).
	pemTailRE = regexp.MustCompile(`(?m)(?:^[ \t]*[A-Za-z0-9+/=]+[ \t]*\r?\n)*[ \t]*-----END [A-Z0-9 ]*-----`)
	// pemBase64RE matches the base64 of a PEM block: it starts with the
	// base64 of "-----".
	pemBase64RE = regexp.MustCompile(`LS0tLS[0-9A-Za-z+/]*={0,2}`)
)

// replaceRuns replaces secrets in the maximal runs of bytes that in
// accepts: secret gets s and a run's bounds and returns the end of the
// secret the run starts, or -1 for none.
func replaceRuns(s string, in func(byte) bool, secret func(s string, i, j int) int) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !in(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && in(s[j]) {
			j++
		}
		if end := secret(s, i, j); end > 0 {
			b.WriteString(s[last:i])
			b.WriteString(Mark)
			last, j = end, end
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isAlnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

func isBase64(c byte) bool    { return isAlnum(c) || c == '+' || c == '/' }
func isBase64URL(c byte) bool { return isBase64(c) || c == '-' || c == '_' }
func isTokenByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' }

// longBase64 takes a run of 64 or more base64 characters (s[i:j]) and its
// padding, unless it is one of the long words that share its alphabet: a
// hex digest, a path (it starts with a slash and has no plus sign), or a
// word without digits or without both cases.
func longBase64(s string, i, j int) int {
	if j-i < 64 {
		return -1
	}
	run := s[i:j]
	if run[0] == '/' && !strings.Contains(run, "+") {
		return -1
	}
	var upper, lower, digit, nonHex bool
	for _, c := range []byte(run) {
		switch {
		case c >= 'A' && c <= 'Z':
			upper = true
			nonHex = nonHex || c > 'F'
		case c >= 'a' && c <= 'z':
			lower = true
			nonHex = nonHex || c > 'f'
		case c >= '0' && c <= '9':
			digit = true
		default:
			nonHex = true
		}
	}
	if !nonHex || !upper || !lower || !digit {
		return -1
	}
	for n := 0; n < 2 && j < len(s) && s[j] == '='; n++ {
		j++
	}
	return j
}

// key32 takes a run of 43 characters of either base64 alphabet (s[i:j])
// with one padding character after it: the padded base64 of 32 bytes.
// A provider checksum ("h1:" and the base64 of a sha256) stays.
func key32(s string, i, j int) int {
	if j-i != 43 || j >= len(s) || s[j] != '=' || j+1 < len(s) && s[j+1] == '=' || strings.HasSuffix(s[:i], "h1:") {
		return -1
	}
	return j + 1
}

// token takes a run that is a bootstrap or trustd token (s[i:j]): six and
// sixteen lowercase letters and digits around a dot, not inside a longer
// word.
func token(s string, i, j int) int {
	if j-i != 23 || s[i+6] != '.' || strings.Contains(s[i:i+6], ".") || strings.Contains(s[i+7:j], ".") {
		return -1
	}
	if i > 0 && (isAlnum(s[i-1]) || s[i-1] == '_') || j < len(s) && (isAlnum(s[j]) || s[j] == '_') {
		return -1
	}
	return j
}
