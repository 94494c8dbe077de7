package schema

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// SOPS-encrypted manifest files.
//
// A manifest file is SOPS-encrypted when the top-level mapping of one of
// its documents has a "sops" key (the sops CLI writes its metadata into
// every document). With Options.Decrypt, Load validates the decrypted
// documents, at the lines of the file as committed: each key and list item
// is found there by its path. An object's Source.Encrypted lists the
// pointers of its encrypted values under /spec; the object's identity
// (apiVersion, kind, metadata) names it in the API, statuses and messages,
// and is used as decrypted. Every problem of a document that holds
// encrypted values is told without them: a quoted part of a message that
// an encrypted value holds, and the value itself, read EncryptedValue.
//
// Without Options.Decrypt the file is checked except for its encrypted
// values: problems at or under them are dropped, and they read
// EncryptedValue in the objects. A document whose identity is encrypted
// cannot be told apart from one of another apiVersion, and yields nothing.

// sopsKey is the top-level key of a document that holds SOPS metadata.
const sopsKey = "sops"

// encryptedScalar matches a value the SOPS AES cipher wrote, and gives its
// type; a comment in a list is written as an item of type comment.
var encryptedScalar = regexp.MustCompile(`^ENC\[AES256_GCM,data:[A-Za-z0-9+/=]*,iv:[A-Za-z0-9+/=]*,tag:[A-Za-z0-9+/=]*,type:([a-z]+)\]$`)

// sopsDoc is what Load knows of a document of an encrypted file: whether
// it was decrypted, the pointers of its encrypted values in the order of
// the file and, when decrypted, the plain text (a scalar's YAML value) of
// those that are secrets.
type sopsDoc struct {
	decrypted bool
	pointers  []string
	secrets   []string
}

// isSOPS reports whether one of docs is a mapping with a sops key.
func isSOPS(docs []*yaml.Node) bool {
	for _, d := range docs {
		if m := documentRoot(d); m.Kind == yaml.MappingNode && keyIndex(m, sopsKey) >= 0 {
			return true
		}
	}
	return false
}

func documentRoot(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0]
	}
	return n
}

// keyIndex returns the index in m.Content of the key named key, or -1.
func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return i
		}
	}
	return -1
}

// stripSOPS takes out of encrypted documents what sops adds to them: the
// sops key of each top-level mapping, and the encrypted comments it writes
// as items of lists. What is left has the keys and items of the plain
// documents.
func stripSOPS(docs []*yaml.Node) {
	for _, d := range docs {
		root := documentRoot(d)
		if root.Kind == yaml.MappingNode {
			if i := keyIndex(root, sopsKey); i >= 0 {
				root.Content = slices.Delete(root.Content, i, i+2)
			}
		}
		dropEncryptedComments(root, 0)
	}
}

func dropEncryptedComments(n *yaml.Node, depth int) {
	if depth > DefaultMaxDepth*2 {
		return
	}
	if n.Kind == yaml.SequenceNode {
		n.Content = slices.DeleteFunc(n.Content, func(c *yaml.Node) bool {
			m := encryptedScalar.FindStringSubmatch(c.Value)
			return c.Kind == yaml.ScalarNode && m != nil && m[1] == "comment"
		})
	}
	for _, c := range n.Content {
		dropEncryptedComments(c, depth+1)
	}
}

// encryptedPointers returns the pointers of the encrypted values of a
// document, in the order of the file.
func encryptedPointers(root *yaml.Node) []string {
	var out []string
	var walk func(n *yaml.Node, ptr string, depth int)
	walk = func(n *yaml.Node, ptr string, depth int) {
		if depth > DefaultMaxDepth*2 {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], ptr+"/"+escapeToken(n.Content[i].Value), depth+1)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, ptr+"/"+strconv.Itoa(i), depth+1)
			}
		case yaml.ScalarNode:
			if encryptedScalar.MatchString(n.Value) {
				out = append(out, ptr)
			}
		}
	}
	walk(root, "", 0)
	return out
}

// alignPositions gives every node of the plain document p the line and
// column of the node at the same path in the encrypted document e; a node
// e lacks takes the position of its nearest ancestor e has.
func alignPositions(p, e *yaml.Node, depth int) {
	p.Line, p.Column = e.Line, e.Column
	if e.Kind == yaml.AliasNode && e.Alias != nil {
		e = e.Alias
	}
	if depth > DefaultMaxDepth*2 {
		return
	}
	switch {
	case p.Kind == yaml.DocumentNode && e.Kind == yaml.DocumentNode && len(p.Content) > 0 && len(e.Content) > 0:
		alignPositions(p.Content[0], e.Content[0], depth+1)
		return
	case p.Kind == yaml.MappingNode && e.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(p.Content); i += 2 {
			if j := keyIndex(e, p.Content[i].Value); j >= 0 {
				alignPositions(p.Content[i], e.Content[j], depth+1)
				alignPositions(p.Content[i+1], e.Content[j+1], depth+1)
			} else {
				placeAt(p.Content[i], e, depth+1)
				placeAt(p.Content[i+1], e, depth+1)
			}
		}
		return
	case p.Kind == yaml.SequenceNode && e.Kind == yaml.SequenceNode:
		for i, c := range p.Content {
			if i < len(e.Content) {
				alignPositions(c, e.Content[i], depth+1)
			} else {
				placeAt(c, e, depth+1)
			}
		}
		return
	}
	for _, c := range p.Content {
		placeAt(c, e, depth+1)
	}
}

// placeAt gives n and every node under it the position of e.
func placeAt(n, e *yaml.Node, depth int) {
	n.Line, n.Column = e.Line, e.Column
	if depth > DefaultMaxDepth*2 {
		return
	}
	for _, c := range n.Content {
		placeAt(c, e, depth+1)
	}
}

// nodeAt returns the node at a JSON pointer under root, not following
// aliases, or nil.
func nodeAt(root *yaml.Node, ptr string) *yaml.Node {
	n := root
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = unescapeToken(tok)
		switch n.Kind {
		case yaml.MappingNode:
			i := keyIndex(n, tok)
			if i < 0 {
				return nil
			}
			n = n.Content[i+1]
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
	}
	return n
}

// isSecret reports whether an encrypted value at ptr is a secret: one
// under /spec, and not the object's identity.
func isSecret(ptr string) bool {
	return strings.HasPrefix(ptr, "/spec/")
}

// identityPaths are the values that tell which object a document is.
var identityPaths = []string{"/apiVersion", "/kind", "/metadata/name", JSONPointer("metadata", "labels", LabelTenant)}

// atOrUnder reports whether path is ptr or below it.
func atOrUnder(path, ptr string) bool {
	return path == ptr || strings.HasPrefix(path, ptr+"/")
}

// quoted matches a double-quoted Go string in a message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// redact returns msg without any of secrets: a secret written out
// (as a whole word), and a quoted string that a secret holds (a value
// shortened with "..." too), read EncryptedValue.
func redact(msg string, secrets []string) string {
	if len(secrets) == 0 {
		return msg
	}
	msg = quoted.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil {
			return q
		}
		s = strings.TrimSuffix(s, "...")
		for _, secret := range secrets {
			if s != "" && strings.Contains(secret, s) {
				return EncryptedValue
			}
		}
		return q
	})
	for _, secret := range secrets {
		msg = replaceWord(msg, secret)
	}
	return msg
}

// replaceWord replaces each occurrence of w in s that no letter or digit
// touches with EncryptedValue.
func replaceWord(s, w string) string {
	if w == "" {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, w)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(w)
		if (i > 0 && isWordByte(s[i-1])) || (end < len(s) && isWordByte(s[end])) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(EncryptedValue)
		s = s[end:]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// told returns the problems of a document as they may be told: without a
// decrypted secret in their messages, and without those at or under a
// value that was not decrypted. sd nil is a plain document.
func (sd *sopsDoc) told(problems []Problem) []Problem {
	switch {
	case sd == nil || len(problems) == 0:
		return problems
	case sd.decrypted:
		for i := range problems {
			problems[i].Message = redact(problems[i].Message, sd.secrets)
		}
		return problems
	}
	return slices.DeleteFunc(problems, func(p Problem) bool {
		return slices.ContainsFunc(sd.pointers, func(ptr string) bool { return atOrUnder(p.Path, ptr) })
	})
}

// hide puts EncryptedValue in place of the values of a document that were
// not decrypted.
func (sd *sopsDoc) hide(obj map[string]any) {
	if sd == nil || sd.decrypted {
		return
	}
	for _, ptr := range sd.pointers {
		setAt(obj, ptr, EncryptedValue)
	}
}

// secretPointers returns the pointers of the document's secrets in path
// order, for Source.Encrypted.
func (sd *sopsDoc) secretPointers() []string {
	if sd == nil {
		return nil
	}
	var out []string
	for _, p := range sd.pointers {
		if isSecret(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// setAt sets the value at a JSON pointer of a decoded document, when its
// parent is there.
func setAt(obj any, ptr string, v any) {
	i := strings.LastIndexByte(ptr, '/')
	if i < 0 {
		return
	}
	tok := unescapeToken(ptr[i+1:])
	switch parent := lookup(obj, ptr[:i]).(type) {
	case map[string]any:
		if _, ok := parent[tok]; ok {
			parent[tok] = v
		}
	case []any:
		if j, err := strconv.Atoi(tok); err == nil && j >= 0 && j < len(parent) {
			parent[j] = v
		}
	}
}
