// Package atomicfile replaces files so that a reader, or the disk after a
// crash, sees the old content or the new and never a part of either: the
// data goes to a temporary file in the same directory, which is synced,
// renamed over the target, and then the directory is synced so that the
// rename itself is durable. It owns nothing else: it makes no directories,
// takes no locks and never reads the target. It imports nothing of the
// project.
package atomicfile

import (
	"bytes"
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
	return WriteFrom(path, bytes.NewReader(data), perm)
}

// WriteFrom is Write with the data streamed from r, to its end; an error
// of r is an error of WriteFrom.
func WriteFrom(path string, r io.Reader, perm os.FileMode) (err error) {
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
	if _, err := io.CopyBuffer(f, r, make([]byte, 256<<10)); err != nil {
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
	if err := os.Rename(tmp, path); err != nil {
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
