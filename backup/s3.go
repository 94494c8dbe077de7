package backup

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// minPartSize is the smallest part of a multipart upload that S3 accepts
// (but for the last).
const minPartSize = 5 << 20

// s3Store keeps objects in an S3-compatible bucket, under a prefix. Puts
// stream as multipart uploads of one part at a time.
type s3Store struct {
	client   *minio.Client
	endpoint string
	bucket   string
	prefix   string // "" or "a/b", without slashes at either end
	partSize int64
}

var (
	_ Store   = (*s3Store)(nil)
	_ sweeper = (*s3Store)(nil)
)

// openS3 opens "BUCKET/PREFIX" (the URL without its scheme) and checks that
// the bucket exists.
func openS3(ctx context.Context, rest string, o StoreOptions) (*s3Store, error) {
	bucket, prefix, _ := strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	name := "s3://" + rest
	if bucket == "" {
		return nil, fmt.Errorf("backup store %s: no bucket (want s3://BUCKET/PREFIX)", name)
	}
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return nil, fmt.Errorf("backup store %s: prefix: %w", name, err)
		}
	}
	creds, err := s3Credentials(o)
	if err != nil {
		return nil, fmt.Errorf("backup store %s: %w", name, err)
	}
	endpoint := o.S3Endpoint
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	lookup := minio.BucketLookupAuto
	if o.S3PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:        creds,
		Secure:       !o.S3Insecure,
		Region:       o.S3Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("backup store %s: endpoint %s: %w", name, endpoint, err)
	}
	s := &s3Store{client: client, endpoint: endpoint, bucket: bucket, prefix: prefix, partSize: o.PartSize}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if s.partSize < minPartSize {
		return nil, fmt.Errorf("backup store %s: part size %d: S3 needs at least 5 MiB", name, s.partSize)
	}
	ok, err := client.BucketExists(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("backup store %s: cannot check bucket %s at endpoint %s: %w", s, bucket, endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("backup store %s: bucket %s does not exist at endpoint %s", s, bucket, endpoint)
	}
	return s, nil
}

// s3Credentials reads the access and secret keys from their files, else
// from $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY.
func s3Credentials(o StoreOptions) (*credentials.Credentials, error) {
	access, err := secretFrom(o.S3AccessKeyFile, "AWS_ACCESS_KEY_ID")
	if err != nil {
		return nil, err
	}
	secret, err := secretFrom(o.S3SecretKeyFile, "AWS_SECRET_ACCESS_KEY")
	if err != nil {
		return nil, err
	}
	if access == "" || secret == "" {
		return nil, fmt.Errorf("no credentials: give an access key file and a secret key file, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	return credentials.NewStaticV4(access, secret, ""), nil
}

func secretFrom(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("credentials: %s is empty", file)
	}
	return v, nil
}

func (s *s3Store) String() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + s.prefix
}

func (s *s3Store) object(key string) string {
	if s.prefix == "" {
		return key
	}
	return s.prefix + "/" + key
}

// Put uploads r as a multipart upload of parts of s.partSize, one at a
// time, which minio-go aborts on any error; a *bytes.Reader (a manifest, a
// state) goes in a single request when it fits one part.
func (s *s3Store) Put(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return err
	}
	size := int64(-1)
	if br, ok := r.(*bytes.Reader); ok {
		size = int64(br.Len())
	}
	_, err := s.client.PutObject(ctx, s.bucket, s.object(key), r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    uint64(s.partSize),
		NumThreads:  1,
	})
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", s, key, err)
	}
	return nil
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", s, key, err)
	}
	info, err := obj.Stat()
	if err != nil {
		obj.Close()
		if isNoSuchKey(err) {
			return nil, fmt.Errorf("get %s/%s: %w", s, key, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s/%s: %w", s, key, err)
	}
	return &sized{ReadCloser: obj, size: info.Size}, nil
}

func isNoSuchKey(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == minio.NoSuchKey || code == "NotFound"
}

// List skips objects whose names could not be keys of this package.
func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine on an early return
	full := s.object(prefix)
	if prefix == "" && s.prefix != "" {
		full = s.prefix + "/"
	}
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", s, prefix, obj.Err)
		}
		key := obj.Key
		if s.prefix != "" {
			key = strings.TrimPrefix(key, s.prefix+"/")
		}
		if checkKey(key) == nil {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.object(key), minio.RemoveObjectOptions{})
	if err != nil && !isNoSuchKey(err) {
		return fmt.Errorf("delete %s/%s: %w", s, key, err)
	}
	return nil
}

// sweep aborts the multipart uploads under prefix started before before:
// those of a Put that a crash of the server cut short.
func (s *s3Store) sweep(ctx context.Context, prefix string, before time.Time) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	core := minio.Core{Client: s.client}
	for u := range s.client.ListIncompleteUploads(ctx, s.bucket, s.object(prefix), true) {
		if u.Err != nil {
			return fmt.Errorf("sweep %s/%s: %w", s, prefix, u.Err)
		}
		if !u.Initiated.Before(before) {
			continue
		}
		if err := core.AbortMultipartUpload(ctx, s.bucket, u.Key, u.UploadID); err != nil && minio.ToErrorResponse(err).Code != "NoSuchUpload" {
			return fmt.Errorf("sweep %s/%s: abort the upload of %s: %w", s, prefix, u.Key, err)
		}
	}
	return nil
}
