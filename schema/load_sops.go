package schema

import (
	"fmt"
	"strconv"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// loadSOPS checks the documents of a SOPS-encrypted file, parsed as
// encrypted, into r: decrypted with Options.Decrypt, or without their
// encrypted values when there is none (see sops.go).
func (l *loader) loadSOPS(f manifestFile, encrypted []*yaml.Node, r *fileResult) {
	r.sops = true
	stripSOPS(encrypted)
	if l.opts.Decrypt == nil {
		r.undecrypted = true
		budget := aliasBudget(encrypted)
		for _, n := range encrypted {
			sd := &sopsDoc{pointers: encryptedPointers(documentRoot(n))}
			if !sd.identified() {
				continue
			}
			l.addDocument(r, f.name, n, budget, sd)
		}
		return
	}
	plain, pointers, err := l.opts.Decrypt.Decrypt(f.name, f.data)
	if err != nil {
		r.problems = append(r.problems, Problem{File: f.name, Message: strings.TrimPrefix(err.Error(), f.name+": ")})
		return
	}
	docs, err := parseDocuments(plain)
	if err != nil || len(docs) != len(encrypted) {
		r.problems = append(r.problems, Problem{File: f.name, Message: fmt.Sprintf("the decrypted file holds %d YAML documents, the file %d", len(docs), len(encrypted))})
		return
	}
	byDoc := make([][]string, len(docs))
	for _, p := range pointers {
		i, rest, ok := splitDocumentPointer(p)
		if !ok || i >= len(docs) {
			r.problems = append(r.problems, Problem{File: f.name, Message: fmt.Sprintf("the decrypter named a value outside the file's documents (%s)", p)})
			return
		}
		byDoc[i] = append(byDoc[i], rest)
	}
	budget := aliasBudget(docs)
	for i, n := range docs {
		alignPositions(n, encrypted[i], 0)
		sd := &sopsDoc{decrypted: true, pointers: byDoc[i]}
		for _, p := range byDoc[i] {
			if v := nodeAt(documentRoot(n), p); isSecret(p) && v != nil && v.Kind == yaml.ScalarNode {
				sd.secrets = append(sd.secrets, v.Value)
			}
		}
		l.addDocument(r, f.name, n, budget, sd)
	}
}

// splitDocumentPointer splits "/N/rest" into the document index N and the
// pointer /rest inside it.
func splitDocumentPointer(p string) (int, string, bool) {
	if !strings.HasPrefix(p, "/") {
		return 0, "", false
	}
	idx, rest, found := strings.Cut(p[1:], "/")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return 0, "", false
	}
	if found {
		rest = "/" + rest
	}
	return i, rest, true
}

// identified reports whether a document read without decryption tells
// which object it is: its apiVersion, kind, name and tenant label are not
// encrypted.
func (sd *sopsDoc) identified() bool {
	for _, p := range sd.pointers {
		for _, id := range identityPaths {
			if atOrUnder(p, id) {
				return false
			}
		}
	}
	return true
}
