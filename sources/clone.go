package sources

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
)

// maxPacks is how many packs the clone may hold before they are merged
// into one. Every fetch adds a pack, and every object lookup and every
// fetch's negotiation costs time in proportion to the number of packs.
const maxPacks = 32

// storage opens the clone, creating it on first use. The caller holds
// clone.mu.
func (g *Git) storage() (*filesystem.Storage, error) {
	if g.st == nil {
		if err := os.MkdirAll(g.dir, 0o700); err != nil {
			return nil, fmt.Errorf("clone of %s: %w", g.remote.url, err)
		}
		st := filesystem.NewStorage(osfs.New(g.dir), cache.NewObjectLRU(16*cache.MiByte))
		repo, err := git.Open(st, nil)
		if errors.Is(err, git.ErrRepositoryNotExists) {
			repo, err = git.Init(st, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("clone of %s in %s: %w", g.remote.url, g.dir, err)
		}
		cfg, err := repo.Config()
		if err != nil {
			return nil, fmt.Errorf("clone of %s in %s: %w", g.remote.url, g.dir, err)
		}
		if rc := cfg.Remotes["origin"]; rc == nil || len(rc.URLs) != 1 || rc.URLs[0] != g.remote.url {
			cfg.Remotes["origin"] = &config.RemoteConfig{
				Name:  "origin",
				URLs:  []string{g.remote.url},
				Fetch: []config.RefSpec{allRefSpecs[0]},
			}
			if err := st.SetConfig(cfg); err != nil {
				return nil, fmt.Errorf("clone of %s in %s: %w", g.remote.url, g.dir, err)
			}
		}
		g.st, g.gen = st, g.clone.gen
	}
	if g.gen != g.clone.gen {
		g.st.Reindex()
		g.gen = g.clone.gen
	}
	return g.st, nil
}

// snapshot builds the snapshot of commit. Its file system (and its
// Descends) has a storage of its own over the clone, so that reading it
// never races with a later fetch; the root tree is read here, under the
// clone's lock, which makes that storage index the packs as they are now.
// The storage keeps a few packs open; the garbage collector closes them
// with the snapshot.
func (g *Git) snapshot(commit *object.Commit) (Snapshot, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(g.dir), cache.NewObjectLRU(2*cache.MiByte),
		filesystem.Options{MaxOpenDescriptors: 4})
	tree, err := newGitTree(st, commit.TreeHash)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s commit %s: %w", g.remote.url, commit.Hash, err)
	}
	fsys := readOnlyFS{t: tree, modTime: commit.Committer.When}
	if err := checkRoot(fsys, g.root); err != nil {
		return Snapshot{}, fmt.Errorf("%s commit %s: %w", g.remote.url, commit.Hash, err)
	}
	author, _ := commitmsg.BoundLine(commit.Author.Name+" <"+commit.Author.Email+">", commitmsg.MaxLine)
	snap := Snapshot{
		Source:   g.remote.url,
		Ref:      g.refLabel,
		Revision: commit.Hash.String(),
		Author:   author,
		Time:     commit.Committer.When,
		FS:       fsys,
		Root:     g.root,
		history:  &history{tree: tree, commit: commit.Hash, clone: g.dir},
	}
	snap.SetMessage(commit.Message)
	if g.verifier != nil {
		sig := g.verifier.Verify(commit)
		snap.Signature = &sig
	}
	return snap, nil
}

// compact merges the clone's packs when there are more than g.maxPacks
// (maxPacks but in tests): all of them into one, or, while the largest
// holds at least twice as many objects as the others together, the others
// into one beside it. So a merge costs about what was fetched since the
// last one, not the whole repository again (git's geometric repacking).
// The new pack holds every object of the packs it replaces, reachable or
// not, so the snapshots already handed out still find theirs: their
// storage re-reads the list of packs when a pack has gone (see
// gitTree.retry). The caller holds clone.mu.
func (g *Git) compact(st *filesystem.Storage) error {
	packs, err := st.ObjectPacks()
	if err != nil || len(packs) <= g.maxPacks {
		return err
	}
	objects := make(map[plumbing.Hash][]plumbing.Hash, len(packs))
	largest, total := packs[0], 0
	for _, h := range packs {
		if objects[h], err = packObjects(st, h); err != nil {
			return err
		}
		total += len(objects[h])
		if len(objects[h]) > len(objects[largest]) {
			largest = h
		}
	}
	merge := packs
	if len(objects[largest]) >= 2*(total-len(objects[largest])) {
		merge = slices.DeleteFunc(slices.Clone(packs), func(h plumbing.Hash) bool { return h == largest })
	}
	seen := map[plumbing.Hash]struct{}{}
	var hashes []plumbing.Hash
	for _, p := range merge {
		for _, h := range objects[p] {
			if _, ok := seen[h]; !ok {
				seen[h] = struct{}{}
				hashes = append(hashes, h)
			}
		}
	}
	w, err := st.PackfileWriter()
	if err != nil {
		return err
	}
	merged, err := packfile.NewEncoder(w, st, false).Encode(hashes, 10)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, h := range merge {
		if h == merged {
			continue
		}
		if err := st.DeleteOldObjectPackAndIndex(h, time.Time{}); err != nil {
			return err
		}
	}
	st.Reindex()
	g.clone.gen++
	g.gen = g.clone.gen
	g.log.Debug("merged packs", "packs", len(merge), "of", len(packs), "objects", len(hashes))
	return nil
}

// packObjects returns the objects of the clone's pack h, from its index.
func packObjects(st *filesystem.Storage, h plumbing.Hash) ([]plumbing.Hash, error) {
	f, err := st.Filesystem().Open(path.Join("objects", "pack", "pack-"+h.String()+".idx"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return nil, fmt.Errorf("index of pack %s: %w", h, err)
	}
	entries, err := idx.Entries()
	if err != nil {
		return nil, err
	}
	defer entries.Close()
	var out []plumbing.Hash
	for {
		e, err := entries.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("index of pack %s: %w", h, err)
		}
		out = append(out, e.Hash)
	}
}
