// Package examples embeds the example repository of manifests, so that
// `rezuscloud demo` can lay it out on a machine that has only the binary.
//
// The sim examples (production, staging) form one repository, which the
// demo and the tests run on the simulated cloud. The examples for real
// clouds (Clouds) are repositories of their own beside them: the sim
// repository leaves them out.
package examples

import (
	"embed"
	"io/fs"
	"path"
	"strings"
)

// FS holds the sim example manifests and their README, as they sit in this
// directory.
//
//go:embed README.md production staging
var FS embed.FS

// CloudFS holds the examples for real clouds, one directory each.
//
//go:embed openstack oci metal
var CloudFS embed.FS

// Clouds are the directories of the examples for real clouds.
var Clouds = []string{"metal", "oci", "openstack"}

// IsCloud reports whether a slash-separated path relative to this
// directory lies in one of the Clouds directories.
func IsCloud(rel string) bool {
	for _, c := range Clouds {
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return true
		}
	}
	return false
}

// SimOnly returns fsys without the Clouds directories under root (the
// path of this directory in fsys), so that loading root reads only the sim
// examples.
func SimOnly(fsys fs.FS, root string) fs.FS { return simOnly{fsys, root} }

type simOnly struct {
	fsys fs.FS
	root string
}

func (s simOnly) hidden(name string) bool {
	rel, ok := strings.CutPrefix(name, s.root+"/")
	if s.root == "." {
		rel, ok = name, true
	}
	return ok && IsCloud(rel)
}

func (s simOnly) Open(name string) (fs.File, error) {
	if s.hidden(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return s.fsys.Open(name)
}

func (s simOnly) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(s.fsys, name)
	out := entries[:0]
	for _, e := range entries {
		if !s.hidden(path.Join(name, e.Name())) {
			out = append(out, e)
		}
	}
	return out, err
}
