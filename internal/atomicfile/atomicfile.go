// Package atomicfile replaces files (or creates one that must not exist)
// so that a reader, or the disk after a crash, sees the old content or the
// new and never a part of either: the data goes to a temporary file in the
// same directory, which is synced, renamed over the target (or linked to
// it), and then the directory is synced so that the rename itself is
// durable. It owns nothing else: it makes no directories, takes no locks
// and never reads the target. It imports nothing of the project.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions perm (the temporary
// file has them from the start, so the data is never readable by more
// than perm allows). The directory of path must exist. On an error path
// is unchanged and no temporary file is left.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteFrom(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom is Write for data that write streams, of any size: an error
// of write leaves path unchanged and no temporary file, as any other.
func WriteFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	return from(path, perm, write, os.Rename)
}

// CreateFrom is WriteFrom for a path that must not exist: the finished
// file is linked to path, which fails with an error wrapping fs.ErrExist
// when path exists by then, and then nothing is written.
func CreateFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	return from(path, perm, write, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			return err
		}
		return os.Remove(tmp)
	})
}

// from writes a File with write and puts it in place with put.
func from(path string, perm os.FileMode, write func(io.Writer) error, put func(tmp, path string) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.commit(put)
}

// File is the new content of a file, written in a stream: a temporary
// file beside the target, with the target's permissions from the start.
// Commit puts it in place; Abort, or a failed Commit, removes it and
// leaves the target as it was. Call one of them.
type File struct {
	f    *os.File
	path string
	done bool
}

// Create starts replacing path, whose directory must exist, with what is
// written to the File, with permissions perm.
func Create(path string, perm os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &File{f: f, path: path}, nil
}

// Write writes p to the temporary file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// Name returns the temporary file's path: what was written can be read
// there before Commit.
func (f *File) Name() string { return f.f.Name() }

// Commit syncs the temporary file, renames it over the target and syncs
// the directory. On an error the target is unchanged and the temporary
// file is gone.
func (f *File) Commit() error { return f.commit(os.Rename) }

func (f *File) commit(put func(tmp, path string) error) (err error) {
	if f.done {
		return fmt.Errorf("write %s: already committed or aborted", f.path)
	}
	f.done = true
	tmp := f.f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", f.path, err)
		}
	}()
	if err := f.f.Sync(); err != nil {
		f.f.Close()
		return err
	}
	if err := f.f.Close(); err != nil {
		return err
	}
	if err := put(tmp, f.path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(tmp))
}

// Abort removes the temporary file and leaves the target as it was. After
// Commit or Abort it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
