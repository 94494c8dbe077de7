package backup

import "errors"

// ErrNotFound is returned (wrapped) when a key or a backup is absent.
var ErrNotFound = errors.New("backup: not found")
