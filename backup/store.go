package backup

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Store is where encrypted objects rest. Keys are slash-separated, relative
// to the store's root.
type Store interface {
	// Put streams r into key. On any error, nothing is left under key (file:
	// temp file + rename; S3: the multipart upload is aborted). Memory is
	// bounded (S3 part size 8 MiB by default, one part in flight), whatever
	// the size of r.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens key; errors.Is(err, ErrNotFound) when it is absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every key under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key; an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// String names the store ("file:///dir", "s3://bucket/prefix"), never
	// with credentials.
	String() string
}

// StoreOptions configure OpenStore. Zero values take the defaults named.
type StoreOptions struct {
	DataDir string // the server's data dir: the file store's default is DataDir/backups

	S3Endpoint      string // host:port; https unless S3Insecure
	S3Region        string
	S3PathStyle     bool   // bucket in the path rather than in the host name
	S3Insecure      bool   // plain http (loopback test servers)
	S3AccessKeyFile string // else $AWS_ACCESS_KEY_ID
	S3SecretKeyFile string // else $AWS_SECRET_ACCESS_KEY
	PartSize        int64  // S3 multipart part size, default 8 MiB
}

// DefaultPartSize is the S3 multipart part size when StoreOptions name none:
// the memory one upload holds, and a limit of 80 GB per object (S3 allows
// 10,000 parts).
const DefaultPartSize = 8 << 20

// OpenStore opens "file:///abs/dir", "" (the file store under
// DataDir/backups) or "s3://BUCKET/PREFIX". The S3 bucket must exist;
// OpenStore checks it, with a clear error naming bucket and endpoint.
func OpenStore(ctx context.Context, url string, o StoreOptions) (Store, error) {
	switch {
	case url == "":
		if o.DataDir == "" {
			return nil, fmt.Errorf("backup store: no URL and no data dir to default to")
		}
		return openFile(filepath.Join(o.DataDir, "backups"))
	case strings.HasPrefix(url, "file://"):
		dir := strings.TrimPrefix(url, "file://")
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("backup store %q: a file store needs an absolute path (file:///var/lib/rezuscloud/backups)", url)
		}
		return openFile(dir)
	case strings.HasPrefix(url, "s3://"):
		return openS3(ctx, strings.TrimPrefix(url, "s3://"), o)
	}
	return nil, fmt.Errorf("backup store %q: want file:///DIR or s3://BUCKET/PREFIX", url)
}

// checkKey refuses keys that could leave a store's root or collide with its
// temporary files: empty, absolute, or with an empty, "." or ".." element
// (no element may start with a dot).
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("backup store: empty key")
	}
	if strings.ContainsRune(key, '\\') || strings.ContainsRune(key, 0) {
		return fmt.Errorf("backup store: key %q holds a backslash or NUL", key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "" || strings.HasPrefix(el, ".") {
			return fmt.Errorf("backup store: key %q has an empty element or one that starts with a dot", key)
		}
	}
	return nil
}

// checkPrefix is checkKey for list prefixes: empty, or a key with or without
// a trailing slash, or the start of one.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return checkKey(strings.TrimSuffix(prefix, "/"))
}

// sized is what the stores' Get returns: the object's stored size, known
// before it is read (Download writes it in a tar header).
type sized struct {
	io.ReadCloser
	size int64
}

func (s *sized) Size() int64 { return s.size }
