package store

import "io"

// Backuper is a store that copies itself whole, as the engine keeps it:
// TF states stay as they were written (encrypted when tofu encrypts
// them), and the copy is a store the same engine opens.
type Backuper interface {
	// WriteBackup writes a consistent copy of the whole store, as of one
	// commit, to w, and returns the bytes written. Writers go on while
	// it copies; the copy holds none of their changes.
	WriteBackup(w io.Writer) (int64, error)
}
