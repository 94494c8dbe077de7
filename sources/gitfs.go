package sources

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
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

// Bounds of the blobs a stat unpacked and keeps for the read that
// usually follows (see gitTree.unread).
const (
	maxUnreadBlob  = 1 << 20
	maxUnreadBytes = 32 << 20
)

// gitTree reads a commit's tree straight from a repository's object
// storage, without a checkout. go-git's storage is not safe for concurrent
// use, so every access holds mu; the storage must not be shared with code
// that writes to it.
type gitTree struct {
	mu    sync.Mutex
	s     storer.EncodedObjectStorer
	trees map[string]*object.Tree // decoded directories by path, "." the root
	root  plumbing.Hash           // the hash of the root tree
	sizes map[plumbing.Hash]int64
	// unread holds the blobs that a stat unpacked to learn their size
	// (a blob stored as a delta has no size short of that), until a read
	// takes them: a walk that stats each file and then reads it unpacks
	// each blob once. unreadBytes is their size, at most maxUnreadBytes.
	unread      map[plumbing.Hash]plumbing.EncodedObject
	unreadBytes int64
}

// newTreeFS returns the read-only file system of the tree with hash root,
// every entry dated modTime.
func newTreeFS(s storer.EncodedObjectStorer, root plumbing.Hash, modTime time.Time) (fs.FS, error) {
	g, err := newGitTree(s, root)
	if err != nil {
		return nil, err
	}
	return readOnlyFS{t: g, modTime: modTime}, nil
}

// newGitTree reads the root tree root from s.
func newGitTree(s storer.EncodedObjectStorer, root plumbing.Hash) (*gitTree, error) {
	g := &gitTree{s: s, root: root, sizes: map[plumbing.Hash]int64{}, unread: map[plumbing.Hash]plumbing.EncodedObject{}}
	var t *object.Tree
	err := g.retry(func() (err error) {
		t, err = object.GetTree(s, root)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", root, err)
	}
	g.trees = map[string]*object.Tree{".": t}
	return g, nil
}

// retry runs an object access again after re-reading the list of packs:
// when the clone is compacted, the packs a storage indexed are replaced by
// one that holds all their objects.
func (g *gitTree) retry(f func() error) error {
	err := f()
	r, ok := g.s.(interface{ Reindex() })
	for i := 0; err != nil && ok && !errors.Is(err, ErrTooLarge) && i < 3; i++ {
		r.Reindex()
		err = f()
	}
	return err
}

// tree returns the decoded directory dir, or fs.ErrNotExist when there is
// no directory there (a path through a file, a symlink or a submodule).
func (g *gitTree) tree(dir string) (*object.Tree, error) {
	if t, ok := g.trees[dir]; ok {
		return t, nil
	}
	parent, err := g.tree(path.Dir(dir))
	if err != nil {
		return nil, err
	}
	e, ok := findEntry(parent, path.Base(dir))
	if !ok || e.Mode != filemode.Dir {
		return nil, fs.ErrNotExist
	}
	var t *object.Tree
	err = g.retry(func() (err error) {
		t, err = object.GetTree(g.s, e.Hash)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", e.Hash, err)
	}
	g.trees[dir] = t
	return t, nil
}

// find returns the tree entry of name; the root has no entry and reports
// ok false.
func (g *gitTree) find(name string) (e object.TreeEntry, ok bool, err error) {
	if name == "." {
		return object.TreeEntry{}, false, nil
	}
	parent, err := g.tree(path.Dir(name))
	if err != nil {
		return object.TreeEntry{}, false, err
	}
	te, ok := findEntry(parent, path.Base(name))
	if !ok {
		return object.TreeEntry{}, false, fs.ErrNotExist
	}
	return *te, true, nil
}

// findEntry returns the entry called name in t. go-git's lookup refuses
// names that git itself would not check out, such as ones with control
// characters; those are looked up here too, so that the loader can say
// what is wrong with such a name instead of reporting a missing file.
func findEntry(t *object.Tree, name string) (*object.TreeEntry, bool) {
	e, err := t.FindEntry(name)
	if err == nil {
		return e, true
	}
	if errors.Is(err, object.ErrEntryNotFound) {
		return nil, false
	}
	for i := range t.Entries {
		if t.Entries[i].Name == name {
			return &t.Entries[i], true
		}
	}
	return nil, false
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
	if !hasBlob(e.Mode) {
		return n, nil
	}
	size, ok := g.sizes[e.Hash]
	if !ok {
		err := g.retry(func() error {
			obj, err := g.s.EncodedObject(plumbing.BlobObject, e.Hash)
			if err == nil {
				size = obj.Size()
				g.keepUnread(obj)
			}
			return err
		})
		if err != nil {
			return node{}, fmt.Errorf("blob %s: %w", e.Hash, err)
		}
		g.sizes[e.Hash] = size
	}
	n.size = size
	return n, nil
}

func (g *gitTree) list(name string) ([]entry, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, err := g.tree(name)
	if err != nil {
		return nil, err
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
	if !hasBlob(e.Mode) {
		return []byte{}, nil
	}
	var data []byte
	err = g.retry(func() (err error) {
		data, err = g.readBlob(e.Hash)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", e.Hash, err)
	}
	return data, nil
}

// keepUnread keeps a blob a stat unpacked for the read that follows,
// within the bounds.
func (g *gitTree) keepUnread(obj plumbing.EncodedObject) {
	if obj.Size() <= maxUnreadBlob && g.unreadBytes+obj.Size() <= maxUnreadBytes {
		g.unread[obj.Hash()] = obj
		g.unreadBytes += obj.Size()
	}
}

// blob returns the blob h, taking it from unread when a stat kept it.
func (g *gitTree) blob(h plumbing.Hash) (*object.Blob, error) {
	if obj, ok := g.unread[h]; ok {
		delete(g.unread, h)
		g.unreadBytes -= obj.Size()
		return object.DecodeBlob(obj)
	}
	return object.GetBlob(g.s, h)
}

func (g *gitTree) readBlob(h plumbing.Hash) ([]byte, error) {
	blob, err := g.blob(h)
	if err != nil {
		return nil, err
	}
	if blob.Size > maxBlobSize {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, blob.Size, maxBlobSize)
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(int(blob.Size) + bytes.MinRead)
	if _, err := b.ReadFrom(r); err != nil {
		return nil, err
	}
	g.sizes[h] = int64(b.Len())
	return b.Bytes(), nil
}

// hasBlob reports whether entries of mode m have content in a blob: files
// and symbolic links.
func hasBlob(m filemode.FileMode) bool {
	return m == filemode.Regular || m == filemode.Deprecated || m == filemode.Executable || m == filemode.Symlink
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

// blobHash returns "git-blob:" and the blob hash of the regular file name.
func (g *gitTree) blobHash(name string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok, err := g.find(name)
	if err != nil || !ok {
		return "", false
	}
	switch e.Mode {
	case filemode.Regular, filemode.Deprecated, filemode.Executable:
		return "git-blob:" + e.Hash.String(), true
	}
	return "", false
}

// treeHash returns "git-tree:" and the tree hash of the directory name,
// "." the root.
func (g *gitTree) treeHash(name string) (string, bool) {
	if name == "." {
		return "git-tree:" + g.root.String(), true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok, err := g.find(name)
	if err != nil || !ok || e.Mode != filemode.Dir {
		return "", false
	}
	return "git-tree:" + e.Hash.String(), true
}
