package bolt

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// The errors of copying a store file and putting one in place.
var (
	// ErrLocked says another process, a server, holds the store open.
	ErrLocked = errors.New("another process holds it open")
	// ErrExists says the data dir already holds a store, which Restore
	// replaces only when forced.
	ErrExists = errors.New("the data dir already holds a store")
	// ErrNoStore says the data dir holds no store file.
	ErrNoStore = errors.New("the data dir holds no store")
)

var _ store.Backuper = (*Store)(nil)

// WriteBackup writes a consistent copy of the store file to w, as of the
// last commit, in one read transaction: writers go on meanwhile, and the
// copy is a store file that Open reads. TF states are copied as they were
// written. It returns the bytes written.
//
// The transaction stays open until w has taken the whole copy, and a
// writer that must grow the file's mapping waits for it; w should be
// about as fast as a disk.
func (s *Store) WriteBackup(w io.Writer) (n int64, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("copy store %s: %w", s.path, err)
	}
	return n, nil
}

// FileInfo describes a store file.
type FileInfo struct {
	// Format is the file's format: the current one, or "1", which Open
	// migrates.
	Format string
	// Revision is the store's latest revision (resourceVersion).
	Revision uint64
	// Tenants and States count the tenants and the TF states it holds.
	Tenants, States int
	// Size is the file's size in bytes.
	Size int64
}

// BackupDir writes a consistent copy of the store of the data dir dir to
// w, as WriteBackup does, when no process holds it open. It opens the
// file read-only, and waits up to timeout for a process that holds it
// before it gives up with ErrLocked. A dir without a store file gives
// ErrNoStore.
func BackupDir(dir string, w io.Writer, timeout time.Duration) (FileInfo, error) {
	path := filepath.Join(dir, DBFile)
	db, size, err := openReadOnly(path, timeout)
	if errors.Is(err, fs.ErrNotExist) {
		return FileInfo{}, fmt.Errorf("%s: %w", dir, ErrNoStore)
	}
	if err != nil {
		return FileInfo{}, err
	}
	defer db.Close()
	var info FileInfo
	err = db.View(func(tx *bbolt.Tx) error {
		if info, err = describe(tx, size); err != nil {
			return err
		}
		info.Size, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return FileInfo{}, fmt.Errorf("copy store %s: %w", path, err)
	}
	return info, nil
}

// CheckFile checks that path is a store file that Open reads: a bbolt
// file, whole (not cut short), whose pages pass bbolt's consistency check,
// with the buckets of a store and a format this build reads or migrates.
// It opens the file read-only, and gives ErrLocked when a process holds
// it open.
func CheckFile(path string) (FileInfo, error) {
	db, size, err := openReadOnly(path, time.Second)
	if err != nil {
		return FileInfo{}, err
	}
	defer db.Close()
	var info FileInfo
	err = db.View(func(tx *bbolt.Tx) error {
		if info, err = describe(tx, size); err != nil {
			return err
		}
		var first error
		for err := range tx.Check() { // to its end: Check's goroutine sends every error
			if first == nil {
				first = fmt.Errorf("not consistent: %w", err)
			}
		}
		return first
	})
	if err != nil {
		return FileInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	info.Size = size
	return info, nil
}

// openReadOnly opens the bbolt file at path read-only, sharing its lock
// with other readers, and returns it with the file's size.
func openReadOnly(path string, timeout time.Duration) (*bbolt.DB, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil, 0, fmt.Errorf("%s is not a store file: it is empty or not a regular file", path)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, bbolterrors.ErrTimeout) {
		return nil, 0, fmt.Errorf("open store %s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s is not a store file: %w", path, err)
	}
	return db, fi.Size(), nil
}

// describe checks that tx is of a whole store file of size bytes that
// this build reads, and says what it holds. It reads the pages past the
// meta pages only once it knows that the file holds them.
func describe(tx *bbolt.Tx, size int64) (FileInfo, error) {
	if want := tx.Size(); size < want {
		return FileInfo{}, fmt.Errorf("cut short: %d bytes, its pages need %d", size, want)
	}
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return FileInfo{}, errors.New("not a store file: no meta bucket")
	}
	for _, name := range [][]byte{bucketResources, bucketStates, bucketLocks} {
		if tx.Bucket(name) == nil {
			return FileInfo{}, fmt.Errorf("not a store file: no %s bucket", name)
		}
	}
	format := meta.Get(keyFormat)
	if format == nil {
		return FileInfo{}, errors.New("not a store file: no format")
	}
	if err := checkFormat(format); err != nil {
		return FileInfo{}, err
	}
	info := FileInfo{Format: string(format), Revision: meta.Sequence()}
	info.Tenants = (&Tx{tx: tx}).Count(schema.KindTenant)
	err := tx.Bucket(bucketStates).ForEachBucket(func([]byte) error {
		info.States++
		return nil
	})
	return info, err
}

// Restore puts the store file src in place as the store of the data dir
// dir, after CheckFile has passed it. dir is made a data dir as Open
// makes it (0700); the store file gets mode 0600. It refuses, with
// ErrLocked, while a process holds dir's store open, and, with ErrExists,
// to replace a store that dir already holds unless force. It holds the
// store's lock while it puts the copy in place, so that a server does not
// open the store in the middle. On an error dir's store is as it was.
func Restore(dir, src string, force bool) (FileInfo, error) {
	info, err := CheckFile(src)
	if err != nil {
		return FileInfo{}, err
	}
	path, err := privateDataDir(dir)
	if err != nil {
		return FileInfo{}, err
	}
	unlock, err := lockStoreFile(path)
	if err != nil {
		return FileInfo{}, err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil && !force {
		return FileInfo{}, fmt.Errorf("%s: %w", path, ErrExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return FileInfo{}, err
	}
	return info, copyInPlace(src, path)
}

// copyInPlace replaces path with a copy of src, mode 0600, atomically.
func copyInPlace(src, path string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := atomicfile.Create(path, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Abort()
		return fmt.Errorf("copy %s to %s: %w", src, path, err)
	}
	return out.Commit()
}
