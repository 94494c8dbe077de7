package bolt

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/rezuscloud/rezuscloud/store"
)

// The series area is one bucket of keys and bytes beside the resources:
// writes to it take no revision and are not logged, so package history's
// frequent writes leave the event log to the API's changes. A file of an
// earlier build gets the bucket when it is opened (prepareFile).

// PutSeries stores data under key in the series area.
func (tx *Tx) PutSeries(key string, data []byte) error {
	if key == "" {
		return errors.New("put series: empty key")
	}
	if err := tx.tx.Bucket(bucketSeries).Put([]byte(key), data); err != nil {
		return fmt.Errorf("put series %q: %w", key, err)
	}
	return nil
}

// Series returns a copy of the bytes under key in the series area.
func (tx *Tx) Series(key string) ([]byte, error) {
	v := tx.tx.Bucket(bucketSeries).Get([]byte(key))
	if v == nil {
		return nil, fmt.Errorf("series %q: %w", key, store.ErrNotFound)
	}
	return bytes.Clone(v), nil
}

// ScanSeries calls fn with each key of the series area under prefix, in
// key order; data points into the transaction.
func (tx *Tx) ScanSeries(prefix string, fn func(key string, data []byte) error) error {
	c := tx.tx.Bucket(bucketSeries).Cursor()
	p := []byte(prefix)
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		if err := fn(string(k), v); err != nil {
			return err
		}
	}
	return nil
}

// DeleteSeries removes key from the series area.
func (tx *Tx) DeleteSeries(key string) error {
	if err := tx.tx.Bucket(bucketSeries).Delete([]byte(key)); err != nil {
		return fmt.Errorf("delete series %q: %w", key, err)
	}
	return nil
}
