package sources

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// tree is what a snapshot's file system reads from: a git tree or an
// in-memory copy of a directory. Names passed to it are valid fs paths.
type tree interface {
	// stat describes name without following anything.
	stat(name string) (node, error)
	// list returns the entries of the directory name, in any order.
	list(name string) ([]entry, error)
	// read returns the content of name: a file's bytes, a symbolic link's
	// target, nothing for a submodule. The caller may keep the slice.
	read(name string) ([]byte, error)
}

type node struct {
	mode fs.FileMode
	size int64
}

type entry struct {
	name string
	mode fs.FileMode // type bits only
}

// readOnlyFS is a snapshot's file system: fs.FS, fs.ReadDirFS,
// fs.ReadFileFS, fs.StatFS and fs.ReadLinkFS over a tree that never
// changes. Nothing in it follows a symbolic link or a submodule.
type readOnlyFS struct {
	t       tree
	modTime time.Time
}

var (
	_ fs.ReadDirFS  = readOnlyFS{}
	_ fs.ReadFileFS = readOnlyFS{}
	_ fs.StatFS     = readOnlyFS{}
	_ fs.ReadLinkFS = readOnlyFS{}
)

var (
	errIsDir      = errors.New("is a directory")
	errNotDir     = errors.New("not a directory")
	errNotSymlink = errors.New("not a symbolic link")
)

func (f readOnlyFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.t.stat(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	info := f.info(name, n)
	if n.mode.IsDir() {
		entries, err := f.readDir(name)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &openDir{path: name, info: info, entries: entries}, nil
	}
	data, err := f.t.read(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &openFile{path: name, info: info, r: bytes.NewReader(data)}, nil
}

// ContentHash returns a hash of the regular file name that changes
// whenever its bytes do, without reading it: the blob hash of a git tree's
// file ("git-blob:<sha>"). A directory's copy knows none. Loaders that
// cache what they parsed key by it (schema.ContentHasher).
func (f readOnlyFS) ContentHash(name string) (string, bool) {
	h, ok := f.t.(interface{ blobHash(string) (string, bool) })
	if !ok || !fs.ValidPath(name) {
		return "", false
	}
	return h.blobHash(name)
}

// TreeHash returns a hash of the directory name and everything under it
// (the names, modes and contents of its entries) that changes whenever any
// of it does, without listing it: the tree hash of a git tree's directory
// ("git-tree:<sha>"). A directory's copy knows none. Loaders that cache
// what they found under a directory key by it (schema.TreeHasher).
func (f readOnlyFS) TreeHash(name string) (string, bool) {
	h, ok := f.t.(interface{ treeHash(string) (string, bool) })
	if !ok || !fs.ValidPath(name) {
		return "", false
	}
	return h.treeHash(name)
}

func (f readOnlyFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.t.stat(name)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return f.info(name, n), nil
}

// Lstat is Stat: the file system never follows symbolic links.
func (f readOnlyFS) Lstat(name string) (fs.FileInfo, error) {
	info, err := f.Stat(name)
	if err != nil {
		err.(*fs.PathError).Op = "lstat"
	}
	return info, err
}

func (f readOnlyFS) ReadLink(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.t.stat(name)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	if n.mode.Type() != fs.ModeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: errNotSymlink}
	}
	data, err := f.t.read(name)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(data), nil
}

func (f readOnlyFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.t.stat(name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if n.mode.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errIsDir}
	}
	data, err := f.t.read(name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

func (f readOnlyFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.t.stat(name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	if !n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errNotDir}
	}
	entries, err := f.readDir(name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return entries, nil
}

// readDir lists the directory name sorted by file name.
func (f readOnlyFS) readDir(name string) ([]fs.DirEntry, error) {
	list, err := f.t.list(name)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	out := make([]fs.DirEntry, len(list))
	for i, e := range list {
		p := e.name
		if name != "." {
			p = name + "/" + e.name
		}
		out[i] = dirEntry{fsys: f, path: p, name: e.name, typ: e.mode.Type()}
	}
	return out, nil
}

func (f readOnlyFS) info(name string, n node) fileInfo {
	return fileInfo{name: path.Base(name), size: n.size, mode: n.mode, modTime: f.modTime}
}

type fileInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() fs.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return i.modTime }
func (i fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fileInfo) Sys() any           { return nil }

// dirEntry looks its size up only when Info is called.
type dirEntry struct {
	fsys readOnlyFS
	path string
	name string
	typ  fs.FileMode
}

func (e dirEntry) Name() string               { return e.name }
func (e dirEntry) IsDir() bool                { return e.typ.IsDir() }
func (e dirEntry) Type() fs.FileMode          { return e.typ }
func (e dirEntry) Info() (fs.FileInfo, error) { return e.fsys.Stat(e.path) }
func (e dirEntry) String() string             { return fs.FormatDirEntry(e) }

// openFile is an open regular file, symbolic link or submodule: its content
// was read in full when it was opened.
type openFile struct {
	path   string
	info   fileInfo
	r      *bytes.Reader
	closed bool
}

func (f *openFile) Stat() (fs.FileInfo, error) {
	if f.closed {
		return nil, &fs.PathError{Op: "stat", Path: f.path, Err: fs.ErrClosed}
	}
	return f.info, nil
}

func (f *openFile) Read(p []byte) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: fs.ErrClosed}
	}
	return f.r.Read(p)
}

func (f *openFile) ReadAt(p []byte, off int64) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: fs.ErrClosed}
	}
	return f.r.ReadAt(p, off)
}

func (f *openFile) Seek(offset int64, whence int) (int64, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "seek", Path: f.path, Err: fs.ErrClosed}
	}
	return f.r.Seek(offset, whence)
}

func (f *openFile) Close() error {
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.path, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

// openDir is an open directory whose entries were listed when it was opened.
type openDir struct {
	path    string
	info    fileInfo
	entries []fs.DirEntry
	off     int
	closed  bool
}

func (d *openDir) Stat() (fs.FileInfo, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "stat", Path: d.path, Err: fs.ErrClosed}
	}
	return d.info, nil
}

func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.path, Err: errIsDir}
}

func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "readdir", Path: d.path, Err: fs.ErrClosed}
	}
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return slices.Clone(rest[:n]), nil
}

func (d *openDir) Close() error {
	if d.closed {
		return &fs.PathError{Op: "close", Path: d.path, Err: fs.ErrClosed}
	}
	d.closed = true
	return nil
}
