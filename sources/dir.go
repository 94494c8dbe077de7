package sources

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults of DirOptions.
const (
	DefaultDebounce    = 300 * time.Millisecond
	DefaultMaxDirBytes = 64 << 20
	DefaultMaxDirFiles = 10000
)

// DirOptions configures a Dir source.
type DirOptions struct {
	// Path of the directory to watch.
	Path string
	// Debounce is how long the directory must stay quiet after a change
	// before it is read again; DefaultDebounce when zero. Changes that
	// never stop are read at the latest every ten Debounce periods.
	Debounce time.Duration
	// MaxBytes caps the total size of the files a snapshot copies;
	// DefaultMaxDirBytes when zero.
	MaxBytes int64
	// MaxFiles caps the number of files (of any kind) in a snapshot;
	// DefaultMaxDirFiles when zero.
	MaxFiles int
	// Logger receives one line per new revision and per failed read;
	// slog.Default() when nil.
	Logger *slog.Logger
}

// Dir is a Source over a local directory, for `--dir` instead of a
// repository. Each snapshot is a copy in memory of every file under the
// directory (.git excluded), so editing the directory later never changes a
// snapshot already taken. Its revision is "sha256:" and a hash of the
// sorted relative paths and their contents.
type Dir struct {
	path     string // as configured, made absolute
	real     string // with symbolic links resolved
	debounce time.Duration
	maxBytes int64
	maxFiles int
	log      *slog.Logger
	trigger  chan struct{}
	running  atomic.Bool

	mu     sync.Mutex
	status Status
}

// NewDir checks that the directory exists and returns a source over it.
func NewDir(opts DirOptions) (*Dir, error) {
	if opts.Path == "" {
		return nil, errors.New("no directory to watch")
	}
	abs, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", opts.Path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", opts.Path, err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", opts.Path, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("directory %s: not a directory", opts.Path)
	}
	if opts.Debounce < 0 || opts.MaxBytes < 0 || opts.MaxFiles < 0 {
		return nil, fmt.Errorf("directory %s: negative debounce or limit", opts.Path)
	}
	d := &Dir{
		path:     abs,
		real:     real,
		debounce: cmp.Or(opts.Debounce, DefaultDebounce),
		maxBytes: cmp.Or(opts.MaxBytes, DefaultMaxDirBytes),
		maxFiles: cmp.Or(opts.MaxFiles, DefaultMaxDirFiles),
		log:      opts.Logger,
		trigger:  make(chan struct{}, 1),
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("source", abs)
	d.status = Status{URL: abs}
	return d, nil
}

// Trigger asks Run to read the directory now.
func (d *Dir) Trigger() {
	select {
	case d.trigger <- struct{}{}:
	default:
	}
}

// Status reports the last read of the directory.
func (d *Dir) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

// Snapshot reads the whole directory into memory now.
func (d *Dir) Snapshot() (Snapshot, error) {
	start := time.Now()
	snap, err := d.read(start)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status.Polls++
	d.status.LastFetch = start
	if err != nil {
		d.status.Failures++
		d.status.Errors++
		d.status.LastError = err.Error()
		return Snapshot{}, err
	}
	d.status.Failures = 0
	d.status.LastError = ""
	d.status.LastSuccess = start
	return snap, nil
}

// Run watches the directory until ctx is done; see Source. It returns an
// error only when the watch cannot be set up.
func (d *Dir) Run(ctx context.Context, out chan<- Snapshot) error {
	if !d.running.CompareAndSwap(false, true) {
		return fmt.Errorf("directory %s: Run is already running", d.path)
	}
	defer d.running.Store(false)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", d.path, err)
	}
	defer w.Close()
	if err := d.watchTree(w, d.real); err != nil {
		return err
	}

	last := ""
	emit := func() bool {
		snap, err := d.Snapshot()
		if err != nil {
			d.log.Warn("read failed", "err", err)
			return true
		}
		if snap.Revision == last {
			return true
		}
		select {
		case out <- snap:
		case <-ctx.Done():
			return false
		}
		last = snap.Revision
		d.mu.Lock()
		d.status.Revision = last
		d.mu.Unlock()
		d.log.Info("new revision", "revision", last)
		return true
	}
	if !emit() {
		return nil
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending <-chan time.Time
	var first time.Time
	schedule := func() {
		now := time.Now()
		if pending == nil {
			first = now
		}
		wait := min(d.debounce, max(0, first.Add(10*d.debounce).Sub(now)))
		timer.Reset(wait)
		pending = timer.C
		d.mu.Lock()
		d.status.NextPoll = now.Add(wait)
		d.mu.Unlock()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if d.ignored(ev.Name) || ev.Op == fsnotify.Chmod {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if info, err := os.Lstat(ev.Name); err == nil && info.IsDir() {
					if err := d.watchTree(w, ev.Name); err != nil {
						d.log.Warn("watch new directory", "err", err)
					}
				}
			}
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.log.Warn("watch", "err", err)
			schedule()
		case <-pending:
			pending = nil
			if !emit() {
				return nil
			}
		case <-d.trigger:
			if !emit() {
				return nil
			}
		}
	}
}

// ignored reports whether name, a path under the real directory, is in or
// is a .git directory.
func (d *Dir) ignored(name string) bool {
	rel, err := filepath.Rel(d.real, name)
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(filepath.ToSlash(rel), "/"), ".git")
}

// watchTree watches dir and every directory under it, except .git.
func (d *Dir) watchTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != d.real {
				return nil
			}
			return fmt.Errorf("watch %s: %w", p, err)
		}
		if !e.IsDir() {
			return nil
		}
		if e.Name() == ".git" && p != d.real {
			return filepath.SkipDir
		}
		if err := w.Add(p); err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		return nil
	})
}

// file is one non-directory entry read from the directory.
type file struct {
	rel  string
	mode fs.FileMode
	data []byte
}

// read copies the directory into memory and hashes it.
func (d *Dir) read(now time.Time) (Snapshot, error) {
	t := &memTree{nodes: map[string]*memNode{".": {mode: fs.ModeDir | 0o555}}}
	var files []file
	var total int64
	err := filepath.WalkDir(d.real, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == d.real {
			return nil
		}
		rel, err := filepath.Rel(d.real, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if e.Name() == ".git" {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			t.nodes[rel] = &memNode{mode: fs.ModeDir | 0o555}
			return nil
		}
		if len(files) >= d.maxFiles {
			return fmt.Errorf("%w: more than %d files (the limit)", ErrTooLarge, d.maxFiles)
		}
		f := file{rel: rel}
		switch typ := e.Type(); {
		case typ.IsRegular():
			info, err := e.Info()
			if err != nil {
				return err
			}
			if total+info.Size() > d.maxBytes {
				return fmt.Errorf("%w: more than %d bytes (the limit)", ErrTooLarge, d.maxBytes)
			}
			if f.data, err = os.ReadFile(p); err != nil {
				return err
			}
			f.mode = 0o444
			if info.Mode()&0o111 != 0 {
				f.mode = 0o555
			}
		case typ&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			f.mode, f.data = fs.ModeSymlink|0o777, []byte(target)
		default:
			f.mode = fs.ModeIrregular
		}
		total += int64(len(f.data))
		if total > d.maxBytes {
			return fmt.Errorf("%w: more than %d bytes (the limit)", ErrTooLarge, d.maxBytes)
		}
		files = append(files, f)
		t.nodes[rel] = &memNode{mode: f.mode, data: f.data}
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("read directory %s: %w", d.path, err)
	}
	for name := range t.nodes {
		if name == "." {
			continue
		}
		parent := t.nodes[path.Dir(name)]
		parent.children = append(parent.children, entry{name: path.Base(name), mode: t.nodes[name].mode.Type()})
	}
	return Snapshot{
		Source:   d.path,
		Revision: contentHash(files),
		Time:     now,
		FS:       readOnlyFS{t: t},
		Root:     ".",
	}, nil
}

// contentHash is "sha256:" and the hash of every file's relative path,
// kind and content, in path order.
func contentHash(files []file) string {
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.rel, b.rel) })
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		kind := byte('f')
		switch f.mode.Type() {
		case fs.ModeSymlink:
			kind = 'l'
		case fs.ModeIrregular:
			kind = 'o'
		}
		h.Write([]byte{kind})
		binary.BigEndian.PutUint64(n[:], uint64(len(f.rel)))
		h.Write(n[:])
		h.Write([]byte(f.rel))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write(n[:])
		h.Write(f.data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// memTree is a directory copied into memory. It never changes after read
// builds it, so it needs no lock.
type memTree struct {
	nodes map[string]*memNode
}

type memNode struct {
	mode     fs.FileMode
	data     []byte
	children []entry
}

func (m *memTree) stat(name string) (node, error) {
	n, ok := m.nodes[name]
	if !ok {
		return node{}, fs.ErrNotExist
	}
	return node{mode: n.mode, size: int64(len(n.data))}, nil
}

func (m *memTree) list(name string) ([]entry, error) {
	n, ok := m.nodes[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	if !n.mode.IsDir() {
		return nil, errNotDir
	}
	return slices.Clone(n.children), nil
}

func (m *memTree) read(name string) ([]byte, error) {
	n, ok := m.nodes[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	if n.mode.IsDir() {
		return nil, errIsDir
	}
	return slices.Clone(n.data), nil
}
