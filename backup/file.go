package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// fileStore keeps objects as files under a directory: 0700 directories,
// 0600 files, each written to a temporary file, synced and renamed
// (internal/atomicfile). The temporary files' names start with a dot, as
// no key's elements do.
type fileStore struct {
	root string
}

var (
	_ Store   = (*fileStore)(nil)
	_ sweeper = (*fileStore)(nil)
)

func openFile(dir string) (*fileStore, error) {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup store file://%s: %w", dir, err)
	}
	return &fileStore{root: dir}, nil
}

func (s *fileStore) String() string { return "file://" + filepath.ToSlash(s.root) }

func (s *fileStore) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

func (s *fileStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return err
	}
	p := s.path(key)
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	write := func(w io.Writer) error {
		_, err := io.CopyBuffer(w, ctxReader{ctx, r}, make([]byte, 256<<10))
		return err
	}
	if err := atomicfile.WriteFrom(p, 0o600, write); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("get %s: not a regular file (%v)", key, err)
	}
	return &sized{ReadCloser: f, size: st.Size()}, nil
}

// List walks the directory that holds prefix; names that start with a dot
// (temporary files of a Put in flight) are never keys.
func (s *fileStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = s.path(prefix[:i])
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.String()+"/"+prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete removes key and then the directories it leaves empty, but for the
// key's first element (a tenant's directory stays, so that a Put into it
// never races with its removal).
func (s *fileStore) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	for dir := path.Dir(key); strings.Contains(dir, "/"); dir = path.Dir(dir) {
		if os.Remove(s.path(dir)) != nil { // not empty, or gone
			break
		}
	}
	return nil
}

// sweep removes the temporary files under prefix that were last written
// before before: those of a Put that a crash cut short.
func (s *fileStore) sweep(ctx context.Context, prefix string, before time.Time) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	var temps []string
	start := s.path(strings.TrimSuffix(prefix, "/"))
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), ".tmp") {
			if info, err := d.Info(); err == nil && info.ModTime().Before(before) {
				temps = append(temps, p)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("sweep %s: %w", prefix, err)
	}
	for _, p := range temps {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sweep %s: %w", prefix, err)
		}
		if filepath.Dir(p) != start {
			os.Remove(filepath.Dir(p)) // when it is empty now
		}
	}
	return nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
