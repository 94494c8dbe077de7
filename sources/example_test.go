package sources_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/sources"
)

// A directory source, as `--dir` uses it: a snapshot is a copy of the
// files, and its revision a hash of their paths and contents.
func ExampleNewDir() {
	dir, _ := os.MkdirTemp("", "manifests")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "tenant.yaml"), []byte("kind: Tenant\n"), 0o644)

	src, err := sources.NewDir(sources.DirOptions{Path: dir})
	if err != nil {
		log.Fatal(err)
	}
	snap, err := src.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tenant.yaml"), []byte("edited later\n"), 0o644)

	b, _ := fs.ReadFile(snap.FS, "tenant.yaml")
	fmt.Printf("%s%.20s\n", b, snap.Revision)
	// Output:
	// kind: Tenant
	// sha256:1027598529785
}

// A git source in a server: Run polls and sends each new revision; the
// caller keeps what it applied when a poll fails.
func ExampleNewGit() {
	auth, err := sources.AuthFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	src, err := sources.NewGit(sources.GitOptions{
		URL:          "https://git.example.com/infra/clusters.git",
		Branch:       "main",
		Path:         "clusters",
		Dir:          "/var/lib/rezuscloud",
		PollInterval: time.Minute,
		Auth:         auth,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snapshots := make(chan sources.Snapshot)
	go src.Run(ctx, snapshots)
	for snap := range snapshots {
		sub, _ := fs.Sub(snap.FS, snap.Root)
		fmt.Println(snap.Revision, sub)
	}
}
