//go:build !linux

package bolt

// ReleaseMapped does nothing outside Linux: the server's resident memory
// keeps the store's pages it has read until the kernel reclaims them.
func (s *Store) ReleaseMapped() error { return nil }

// releaseRead does nothing outside Linux.
func (tx *Tx) releaseRead([]byte) {}
