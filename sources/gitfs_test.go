package sources

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// countingStorer counts the blob lookups of a real object storage.
type countingStorer struct {
	storer.EncodedObjectStorer
	blobs map[plumbing.Hash]int
}

func (c *countingStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if t == plumbing.BlobObject {
		c.blobs[h]++
	}
	return c.EncodedObjectStorer.EncodedObject(t, h)
}

// A walk that stats each file and then reads it, as the manifest loader
// does, looks each blob up once: the read takes what the stat unpacked.
// A blob over maxUnreadBlob is not kept, and a read leaves nothing behind.
func TestTreeFSUnpacksEachBlobOnce(t *testing.T) {
	w := gittest.NewWorkdir(t, "")
	files := map[string]string{
		"a/tenant.yaml": "kind: Tenant\n",
		"a/patch.yaml":  "kind: ConfigPatch\n",
		"big.yaml":      strings.Repeat("# padding\n", maxUnreadBlob/10+1),
	}
	for p, content := range files {
		w.Write(p, content)
	}
	w.Commit("files")
	st := &countingStorer{
		EncodedObjectStorer: filesystem.NewStorage(osfs.New(filepath.Join(w.Dir(), ".git")), cache.NewObjectLRU(0)),
		blobs:               map[plumbing.Hash]int{},
	}
	tree := plumbing.NewHash(w.Run("rev-parse", "HEAD^{tree}"))
	fsys, err := newTreeFS(st, tree, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		info, err := fs.Stat(fsys, p)
		if err != nil || info.Size() != int64(len(content)) {
			t.Fatalf("stat %s: %v, %v", p, info, err)
		}
	}
	for p, content := range files {
		data, err := fs.ReadFile(fsys, p)
		if err != nil || string(data) != content {
			t.Fatalf("read %s: %d bytes, %v", p, len(data), err)
		}
		want := 1
		if p == "big.yaml" {
			want = 2
		}
		if got := st.blobs[plumbing.NewHash(w.Run("rev-parse", "HEAD:"+p))]; got != want {
			t.Errorf("%s: %d blob lookups, want %d", p, got, want)
		}
	}
	g := fsys.(readOnlyFS).t.(*gitTree)
	if len(g.unread) != 0 || g.unreadBytes != 0 {
		t.Errorf("after every read, %d blobs (%d bytes) are still kept", len(g.unread), g.unreadBytes)
	}
}
