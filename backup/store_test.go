package backup_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/minio/minio-go/v7"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// testStore is a store under test and what a test may look at behind it.
type testStore struct {
	backup.Store
	dir string      // the file store's root, or the S3 server's backend directory
	s3  *testenv.S3 // nil for the file store
}

// partSize is the S3 stores' part size in tests: the smallest S3 allows,
// so that a few MiB make a multipart upload of several parts.
const partSize = 5 << 20

func fileStore(t testing.TB) testStore {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backups")
	st, err := backup.OpenStore(t.Context(), "file://"+dir, backup.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return testStore{Store: st, dir: dir}
}

func s3Store(t testing.TB) testStore {
	t.Helper()
	srv := testenv.StartS3(t, "backups")
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	st, err := backup.OpenStore(t.Context(), "s3://backups/rezuscloud/prod", backup.StoreOptions{
		S3Endpoint: srv.Endpoint, S3Region: srv.Region, S3PathStyle: true, S3Insecure: true, PartSize: partSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	return testStore{Store: st, dir: srv.Dir, s3: srv}
}

// eachStore runs f against a file store and against an S3 store on a real
// S3 server.
func eachStore(t *testing.T, f func(t *testing.T, st testStore)) {
	t.Run("file", func(t *testing.T) { f(t, fileStore(t)) })
	t.Run("s3", func(t *testing.T) { f(t, s3Store(t)) })
}

func put(t testing.TB, st backup.Store, key, value string) {
	t.Helper()
	if err := st.Put(t.Context(), key, strings.NewReader(value)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t testing.TB, st backup.Store, key string) string {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}

func list(t testing.TB, st backup.Store, prefix string) []string {
	t.Helper()
	keys, err := st.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return keys
}

func TestStorePutGetListDelete(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		ctx := t.Context()
		put(t, st, "b/2/x", "bx")
		put(t, st, "a/1/x", "ax")
		put(t, st, "a/10/y", "ay")
		put(t, st, "a/1/x", "ax again") // replaces
		if got := get(t, st, "a/1/x"); got != "ax again" {
			t.Errorf("a/1/x = %q, want the second put's", got)
		}
		if got, want := list(t, st, ""), []string{"a/1/x", "a/10/y", "b/2/x"}; !slices.Equal(got, want) {
			t.Errorf("list all = %v, want %v", got, want)
		}
		if got, want := list(t, st, "a/1/"), []string{"a/1/x"}; !slices.Equal(got, want) {
			t.Errorf("list a/1/ = %v, want %v", got, want)
		}
		if got, want := list(t, st, "a/1"), []string{"a/1/x", "a/10/y"}; !slices.Equal(got, want) {
			t.Errorf("list a/1 = %v, want %v", got, want)
		}
		if got := list(t, st, "c/"); len(got) != 0 {
			t.Errorf("list c/ = %v, want nothing", got)
		}
		if _, err := st.Get(ctx, "a/1/z"); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("get of an absent key: %v, want ErrNotFound", err)
		}
		if err := st.Delete(ctx, "a/1/x"); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(ctx, "a/1/x"); err != nil {
			t.Errorf("delete of an absent key: %v", err)
		}
		if got, want := list(t, st, ""), []string{"a/10/y", "b/2/x"}; !slices.Equal(got, want) {
			t.Errorf("list after delete = %v, want %v", got, want)
		}
		if s := st.String(); st.s3 != nil && (strings.Contains(s, st.s3.AccessKey) || strings.Contains(s, st.s3.SecretKey) || s != "s3://backups/rezuscloud/prod") {
			t.Errorf("String() = %q, want s3://backups/rezuscloud/prod without credentials", s)
		}
	})
}

// A stream that fails midway, after more than one S3 part, leaves nothing
// under its key, and the key's earlier value as it was.
func TestStorePutFailureLeavesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		put(t, st, "t/1/kept", "old")
		for _, key := range []string{"t/1/new", "t/1/kept"} {
			broken := io.MultiReader(io.LimitReader(zeros{}, partSize+partSize/2), iotest.ErrReader(errors.New("stream broke")))
			err := st.Put(t.Context(), key, broken)
			if err == nil || !strings.Contains(err.Error(), "stream broke") {
				t.Fatalf("put %s of a broken stream: %v, want its error", key, err)
			}
		}
		if got, want := list(t, st, ""), []string{"t/1/kept"}; !slices.Equal(got, want) {
			t.Errorf("keys after failed puts = %v, want %v", got, want)
		}
		if got := get(t, st, "t/1/kept"); got != "old" {
			t.Errorf("t/1/kept = %q after a failed put over it, want old", got)
		}
		leftovers(t, st, 1)
	})
}

// leftovers fails t unless the store holds, besides its n objects, no
// temporary file (file) and no incomplete multipart upload (S3).
func leftovers(t *testing.T, st testStore, n int) {
	t.Helper()
	if !leftoversAre(t, st, n, 0) {
		t.Error("the store holds more than its objects")
	}
}

// leftoversAre reports whether the store holds n objects and temps
// temporary files (file) or incomplete multipart uploads (S3), saying what
// it holds when not.
func leftoversAre(t *testing.T, st testStore, n, temps int) bool {
	t.Helper()
	var objs, partial []string
	if st.s3 == nil {
		filepath.WalkDir(st.dir, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil || d.IsDir():
			case strings.HasPrefix(d.Name(), "."):
				partial = append(partial, p)
			default:
				objs = append(objs, p)
			}
			return nil
		})
	} else {
		c, err := st.s3.Client()
		if err != nil {
			t.Fatal(err)
		}
		for u := range c.ListIncompleteUploads(t.Context(), st.s3.Bucket, "", true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			partial = append(partial, u.Key)
		}
		for o := range c.ListObjects(t.Context(), st.s3.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			objs = append(objs, o.Key)
		}
	}
	if len(objs) != n || len(partial) != temps {
		t.Logf("the store holds %d objects %v, want %d; and %d partial ones %v, want %d", len(objs), objs, n, len(partial), partial, temps)
		return false
	}
	return true
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestStoreKeysStayInside(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		for _, key := range []string{"", "../x", "a/../../x", "/etc/x", "a//b", "a/./b", "a/.hidden", "a/b/", `a\..\x`} {
			if err := st.Put(t.Context(), key, strings.NewReader("x")); err == nil {
				t.Errorf("put %q succeeded, want it refused", key)
			}
			if _, err := st.Get(t.Context(), key); err == nil || errors.Is(err, backup.ErrNotFound) {
				t.Errorf("get %q: %v, want it refused", key, err)
			}
			if err := st.Delete(t.Context(), key); err == nil {
				t.Errorf("delete %q succeeded, want it refused", key)
			}
		}
		if _, err := st.List(t.Context(), "../"); err == nil {
			t.Error(`list "../" succeeded, want it refused`)
		}
		if got := list(t, st, ""); len(got) != 0 {
			t.Errorf("keys after refused puts: %v", got)
		}
		if st.s3 == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(st.dir), "x")); err == nil {
				t.Error("a put wrote beside the store's root")
			}
		}
	})
}

// A put whose context ends while its reader waits leaves nothing.
func TestStorePutCanceled(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		ctx, cancel := context.WithCancel(t.Context())
		r := &cancelAfter{r: io.LimitReader(zeros{}, 3*partSize), n: partSize + 1, cancel: cancel}
		if err := st.Put(ctx, "t/1/x", r); !errors.Is(err, context.Canceled) {
			t.Fatalf("put canceled midway: %v, want context.Canceled", err)
		}
		if got := list(t, st, ""); len(got) != 0 {
			t.Errorf("keys after a canceled put: %v", got)
		}
		leftovers(t, st, 0)
	})
}

// cancelAfter calls cancel once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= int64(n); c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestOpenStoreErrors(t *testing.T) {
	ctx := t.Context()
	for url, want := range map[string]string{
		"file://relative/dir":  "absolute path",
		"ftp://host/x":         "want file:///DIR or s3://BUCKET/PREFIX",
		"s3:///prefix":         "no bucket",
		"s3://bucket/../other": "prefix",
	} {
		if _, err := backup.OpenStore(ctx, url, backup.StoreOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenStore(%q): %v, want an error with %q", url, err, want)
		}
	}
	dir := t.TempDir()
	st, err := backup.OpenStore(ctx, "", backup.StoreOptions{DataDir: dir})
	if err != nil || st.String() != "file://"+dir+"/backups" {
		t.Errorf("OpenStore of no URL = %v, %v; want the file store under the data dir", st, err)
	}

	srv := testenv.StartS3(t, "present")
	keyFile := filepath.Join(dir, "access")
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(keyFile, []byte(srv.AccessKey+"\n"), 0o600)
	os.WriteFile(secretFile, []byte(srv.SecretKey+"\n"), 0o600)
	o := backup.StoreOptions{S3Endpoint: srv.Endpoint, S3Region: srv.Region, S3PathStyle: true, S3Insecure: true,
		S3AccessKeyFile: keyFile, S3SecretKeyFile: secretFile}
	if _, err := backup.OpenStore(ctx, "s3://present/x", o); err != nil {
		t.Errorf("OpenStore with credentials from files: %v", err)
	}
	small := o
	small.PartSize = 1 << 20
	if _, err := backup.OpenStore(ctx, "s3://present/x", small); err == nil || !strings.Contains(err.Error(), "at least 5 MiB") {
		t.Errorf("OpenStore with 1 MiB parts: %v, want them refused", err)
	}
	_, err = backup.OpenStore(ctx, "s3://absent/x", o)
	if err == nil || !strings.Contains(err.Error(), "bucket absent does not exist at endpoint "+srv.Endpoint) {
		t.Errorf("OpenStore of an absent bucket: %v, want it named with the endpoint", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	o.S3AccessKeyFile = ""
	if _, err := backup.OpenStore(ctx, "s3://present/x", o); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Errorf("OpenStore without an access key: %v, want no credentials", err)
	}
	o.S3AccessKeyFile = secretFile + ".missing"
	_, err = backup.OpenStore(ctx, "s3://present/x", o)
	if err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("OpenStore with a missing key file: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), srv.SecretKey) {
		t.Errorf("an error holds the secret key: %v", err)
	}
}
