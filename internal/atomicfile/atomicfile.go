// Package atomicfile replaces files (or creates one that must not exist)
// so that a reader, or the disk after a crash, sees the old content or the
// new and never a part of either: the
// data goes to a temporary file in the same directory, which is synced,
// renamed over the target, and then the directory is synced so that the
// rename itself is durable. It owns nothing else: it makes no directories,
// takes no locks and never reads the target. It imports nothing of the
// project.
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
	return place(path, perm, write, os.Rename)
}

// CreateFrom is WriteFrom for a path that must not exist: the finished
// file is linked to path, which fails with an error wrapping fs.ErrExist
// when path exists by then, and then nothing is written.
func CreateFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	return place(path, perm, write, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			return err
		}
		return os.Remove(tmp)
	})
}

// place writes a temporary file beside path with write and puts it at
// path with put.
func place(path string, perm os.FileMode, write func(io.Writer) error, put func(tmp, path string) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := put(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
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
