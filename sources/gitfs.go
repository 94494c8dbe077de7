package sources

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// maxBlobSize bounds a file read from a commit: a loader never needs more,
// and a larger blob would be held in memory whole.
const maxBlobSize = 64 << 20

// gitTree reads a commit's tree straight from a repository's object
// storage, without a checkout. go-git's storage is not safe for concurrent
// use, so every access holds mu; the storage must not be shared with code
// that writes to it.
type gitTree struct {
	mu   sync.Mutex
	s    storer.EncodedObjectStorer
	root *object.Tree
}

// newTreeFS returns the read-only file system of the tree with hash root,
// every entry dated modTime.
func newTreeFS(s storer.EncodedObjectStorer, root plumbing.Hash, modTime time.Time) (fs.FS, error) {
	t, err := object.GetTree(s, root)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", root, err)
	}
	return readOnlyFS{t: &gitTree{s: s, root: t}, modTime: modTime}, nil
}

// find returns the tree entry of name; the root has no entry and reports
// ok false.
func (g *gitTree) find(name string) (e object.TreeEntry, ok bool, err error) {
	if name == "." {
		return object.TreeEntry{}, false, nil
	}
	te, err := g.root.FindEntry(name)
	if err != nil {
		if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) ||
			errors.Is(err, plumbing.ErrObjectNotFound) {
			return object.TreeEntry{}, false, fs.ErrNotExist
		}
		return object.TreeEntry{}, false, err
	}
	return *te, true, nil
}

func (g *gitTree) stat(name string) (node, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok, err := g.find(name)
	if err != nil {
		return node{}, err
	}
	if !ok {
		return node{mode: fs.ModeDir | 0o555}, nil
	}
	n := node{mode: fileMode(e.Mode)}
	if e.Mode == filemode.Regular || e.Mode == filemode.Deprecated ||
		e.Mode == filemode.Executable || e.Mode == filemode.Symlink {
		obj, err := g.s.EncodedObject(plumbing.BlobObject, e.Hash)
		if err != nil {
			return node{}, fmt.Errorf("blob %s: %w", e.Hash, err)
		}
		n.size = obj.Size()
	}
	return n, nil
}

func (g *gitTree) list(name string) ([]entry, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.root
	if name != "." {
		var err error
		if t, err = g.root.Tree(name); err != nil {
			if errors.Is(err, object.ErrDirectoryNotFound) {
				return nil, fs.ErrNotExist
			}
			return nil, err
		}
	}
	out := make([]entry, len(t.Entries))
	for i, e := range t.Entries {
		out[i] = entry{name: e.Name, mode: fileMode(e.Mode)}
	}
	return out, nil
}

func (g *gitTree) read(name string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok, err := g.find(name)
	if err != nil {
		return nil, err
	}
	if !ok || e.Mode == filemode.Dir {
		return nil, errIsDir
	}
	if fileMode(e.Mode).Type() == fs.ModeIrregular {
		return []byte{}, nil
	}
	blob, err := object.GetBlob(g.s, e.Hash)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", e.Hash, err)
	}
	if blob.Size > maxBlobSize {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, blob.Size, maxBlobSize)
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", e.Hash, err)
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(int(blob.Size) + bytes.MinRead)
	if _, err := b.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("blob %s: %w", e.Hash, err)
	}
	return b.Bytes(), nil
}

// fileMode maps a git tree entry's mode to the mode the file system
// reports. Submodules are irregular files: they have no content here.
func fileMode(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o555
	case filemode.Executable:
		return 0o555
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Regular, filemode.Deprecated:
		return 0o444
	default:
		return fs.ModeIrregular
	}
}
