package schema

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"sigs.k8s.io/yaml"
)

// The values of a manifest that SOPS encrypted are decrypted into the
// loaded objects, and stay in memory: Source.Encrypted says where they
// are. Every copy of an object that leaves the server's memory (the
// store, the API, diffs, previews, messages) is its Redacted copy, in
// which those values read EncryptedValue. Patch text that a manifest
// wrote as a mapping, and SOPS encrypted value by value, keeps its keys
// and its plain values, its encrypted values reading EncryptedValue.

// Redacted returns a copy of t in which every value that was encrypted
// in its file reads EncryptedValue; t itself when none was.
func (t *Tenant) Redacted() *Tenant {
	if t == nil || len(t.Source.Encrypted) == 0 {
		return t
	}
	out := &Tenant{}
	if !redactInto(t, t.Source.Encrypted, out) {
		out = &Tenant{APIVersion: t.APIVersion, Kind: t.Kind, Metadata: t.Metadata}
	}
	out.Source = t.Source
	return out
}

// Redacted returns a copy of g in which every value that was encrypted
// in its file reads EncryptedValue; g itself when none was.
func (g *NodeGroup) Redacted() *NodeGroup {
	if g == nil || len(g.Source.Encrypted) == 0 {
		return g
	}
	out := &NodeGroup{}
	if !redactInto(g, g.Source.Encrypted, out) {
		out = &NodeGroup{APIVersion: g.APIVersion, Kind: g.Kind, Metadata: g.Metadata}
	}
	out.Source = g.Source
	return out
}

// Redacted returns a copy of p in which every value that was encrypted
// in its file reads EncryptedValue; p itself when none was.
func (p *ConfigPatch) Redacted() *ConfigPatch {
	if p == nil || len(p.Source.Encrypted) == 0 {
		return p
	}
	out := &ConfigPatch{}
	if !redactInto(p, p.Source.Encrypted, out) {
		out = &ConfigPatch{APIVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Metadata}
	}
	out.Source = p.Source
	return out
}

// Encrypted reports whether any object of td had encrypted values.
func (td *TenantDesired) Encrypted() bool {
	if len(td.Tenant.Source.Encrypted) > 0 {
		return true
	}
	for _, ng := range td.NodeGroups {
		if len(ng.Source.Encrypted) > 0 {
			return true
		}
	}
	for _, p := range td.Patches {
		if len(p.Source.Encrypted) > 0 {
			return true
		}
	}
	return false
}

// Redacted returns td with each of its objects Redacted; td itself when
// none had encrypted values.
func (td *TenantDesired) Redacted() *TenantDesired {
	if td == nil || !td.Encrypted() {
		return td
	}
	out := &TenantDesired{Tenant: td.Tenant.Redacted(),
		NodeGroups: make([]*NodeGroup, len(td.NodeGroups)), Patches: make([]*ConfigPatch, len(td.Patches))}
	for i, ng := range td.NodeGroups {
		out.NodeGroups[i] = ng.Redacted()
	}
	for i, p := range td.Patches {
		out.Patches[i] = p.Redacted()
	}
	return out
}

// EncryptedValues returns the plain text of the values of td that were
// encrypted, so that text made from them (an error that quotes a patch)
// can have them removed: each value, each line of one that has several,
// and each word of one that has several. Nil when none was encrypted.
func (td *TenantDesired) EncryptedValues() []string {
	var out []string
	collect := func(obj any, src Source) {
		walkEncrypted(obj, src.Encrypted, func(v any) any {
			out = append(out, plainForms(v)...)
			return v
		})
	}
	collect(td.Tenant, td.Tenant.Source)
	for _, ng := range td.NodeGroups {
		collect(ng, ng.Source)
	}
	for _, p := range td.Patches {
		collect(p, p.Source)
	}
	return out
}

// plainForms returns the text of a decrypted value, and when it has
// several words, each of them; for text that holds YAML (a patch
// encrypted as a whole), each of its values and their words, its keys
// left readable.
func plainForms(v any) []string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return nil
	}
	out := []string{s}
	if !strings.Contains(s, "\n") {
		return append(out, words(s)...)
	}
	for _, doc := range yamlSeparator.Split(s, -1) {
		j, err := yaml.YAMLToJSON([]byte(doc))
		v, ok := decodeJSON(j)
		if err != nil || !ok {
			for _, line := range strings.Split(s, "\n") {
				if line = strings.TrimSpace(line); line != "" {
					out = append(out, line)
				}
			}
			return append(out, words(s)...)
		}
		eachLeaf(v, func(leaf any) any {
			out = append(out, plainForms(leaf)...)
			return leaf
		})
	}
	return out
}

// yamlSeparator splits YAML text into its documents.
var yamlSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// words returns the words of s when it has more than one.
func words(s string) []string {
	w := strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`:,[]{}"'#|>`, r)
	})
	if len(w) < 2 {
		return nil
	}
	return w
}

// encryptable are the places where a manifest may hold encrypted values,
// by kind, as JSON pointers whose "*" stands for any list index: the
// places the server never has to show or hand to tofu in clear. Patches
// reach the machines only through the sensitive variables of tofu's
// configuration; the CNI plugin's values are not rendered at all.
var encryptable = map[string][]string{
	KindTenant:      {"/spec/configPatches/*/patch", "/spec/plugins/cni/values"},
	KindNodeGroup:   {"/spec/configPatches/*/patch"},
	KindConfigPatch: {"/spec/patch"},
}

// CheckEncrypted returns a problem for every encrypted value of desired
// outside the places that may hold one: a value the server shows (names,
// labels, versions, counts) or writes into tofu's configuration in clear
// (providerConfig) cannot stay secret.
func CheckEncrypted(desired *Desired) []Problem {
	var probs []Problem
	check := func(kind string, src Source) {
		for _, ptr := range src.Encrypted {
			if !underAny(ptr, encryptable[kind]) {
				probs = append(probs, Problem{File: src.File, Line: src.LineOf(ptr), Column: 1, Path: ptr,
					Message: "this value is encrypted, but the server shows it or hands it to tofu in clear: only patches " +
						"(spec.patch, spec.configPatches[].patch) and spec.plugins.cni.values may hold encrypted values " +
						"(encrypt only those, e.g. with encrypted_regex: ^(patch|values)$)"})
			}
		}
	}
	for _, td := range desired.Tenants {
		check(KindTenant, td.Tenant.Source)
		for _, ng := range td.NodeGroups {
			check(KindNodeGroup, ng.Source)
		}
		for _, p := range td.Patches {
			check(KindConfigPatch, p.Source)
		}
	}
	return probs
}

// underAny reports whether the JSON pointer ptr is one of places or
// inside one.
func underAny(ptr string, places []string) bool {
	toks := strings.Split(ptr, "/")
	for _, place := range places {
		want := strings.Split(place, "/")
		if len(toks) < len(want) {
			continue
		}
		ok := true
		for i, w := range want {
			if w != toks[i] && (w != "*" || !isIndex(toks[i])) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func isIndex(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil && s != "" && s[0] != '-' && s[0] != '+'
}

// redactInto decodes into out the JSON form of obj with the values at the
// pointers encrypted reading EncryptedValue. It reports false when that
// form does not decode into out: an encrypted value in a field that
// cannot hold text.
func redactInto(obj any, encrypted []string, out any) bool {
	v, ok := walkEncrypted(obj, encrypted, func(any) any { return EncryptedValue })
	if !ok {
		return false
	}
	b, err := json.Marshal(v)
	return err == nil && json.Unmarshal(b, out) == nil
}

// walkEncrypted calls leaf with every value at the pointers encrypted (a
// pointer to a mapping or list: every value in it) in the JSON form of
// obj, and returns that form with each replaced by what leaf returned.
// A pointer that goes on inside a string goes on inside the YAML the
// string holds (a patch that a manifest wrote as a mapping); when it
// does not lead anywhere there, the whole string is the value. A pointer
// to nothing in the JSON form names a value the object does not hold.
func walkEncrypted(obj any, encrypted []string, leaf func(any) any) (any, bool) {
	v, ok := jsonForm(obj)
	if !ok {
		return nil, false
	}
	for _, ptr := range encrypted {
		v, _ = walkAt(v, pointerTokens(ptr), leaf)
	}
	return v, true
}

// jsonForm decodes the JSON form of obj, numbers as json.Number.
func jsonForm(obj any) (any, bool) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	return decodeJSON(b)
}

func decodeJSON(b []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func pointerTokens(ptr string) []string {
	if ptr == "" || ptr == "/" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, t := range toks {
		toks[i] = unescapeToken(t)
	}
	return toks
}

// walkAt replaces the values at toks inside v with what leaf returns,
// and reports whether toks led anywhere.
func walkAt(v any, toks []string, leaf func(any) any) (any, bool) {
	if len(toks) == 0 {
		return eachLeaf(v, leaf), true
	}
	switch x := v.(type) {
	case map[string]any:
		c, ok := x[toks[0]]
		if !ok {
			return v, false
		}
		x[toks[0]], ok = walkAt(c, toks[1:], leaf)
		return x, ok
	case []any:
		i, err := strconv.Atoi(toks[0])
		if err != nil || i < 0 || i >= len(x) {
			return v, false
		}
		var ok bool
		x[i], ok = walkAt(x[i], toks[1:], leaf)
		return x, ok
	case string:
		return walkText(x, toks, leaf), true
	}
	return v, false
}

// walkText walks toks inside the YAML mapping that text holds, and
// returns the text written again; when toks lead nowhere inside it, the
// whole text is the value.
func walkText(text string, toks []string, leaf func(any) any) any {
	if strings.Contains(text, "\n---") || strings.HasPrefix(text, "---") {
		return leaf(text)
	}
	j, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return leaf(text)
	}
	doc, ok := decodeJSON(j)
	if _, isMap := doc.(map[string]any); !ok || !isMap {
		return leaf(text)
	}
	doc, ok = walkAt(doc, toks, leaf)
	if !ok {
		return leaf(text)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return leaf(text)
	}
	out, err := yaml.JSONToYAML(b)
	if err != nil {
		return leaf(text)
	}
	return string(out)
}

// eachLeaf replaces every value inside v (v itself when it is neither a
// mapping nor a list) with what leaf returns.
func eachLeaf(v any, leaf func(any) any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			x[k] = eachLeaf(c, leaf)
		}
		return x
	case []any:
		for i, c := range x {
			x[i] = eachLeaf(c, leaf)
		}
		return x
	}
	return leaf(v)
}
