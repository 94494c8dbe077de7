package schema

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// Defaults of Options.
const (
	DefaultMaxFileSize = 1 << 20  // 1 MiB
	DefaultMaxTreeSize = 64 << 20 // 64 MiB
	DefaultMaxDepth    = 100
)

// Options bound what Load reads. A zero field takes its default.
type Options struct {
	MaxFileSize int64 // largest manifest file, in bytes; default 1 MiB
	MaxTreeSize int64 // all manifest files together, in bytes; default 64 MiB
	MaxDepth    int   // deepest nesting of mappings and lists in a document; default 100
	// Cache, when set, keeps what each file yielded, so that a later Load
	// parses and validates only the files whose content changed.
	Cache *Cache
	// Decrypt, when set, opens the manifest files that SOPS encrypted
	// (see sops.go). Without it such a file is checked except for its
	// encrypted values, and Desired.Undecrypted counts it. A Cache drops
	// what it holds when Decrypt changes, and its store never holds what
	// an encrypted file yielded.
	Decrypt Decrypter
}

// Decrypter opens SOPS-encrypted manifest files.
type Decrypter interface {
	// Decrypt returns the plain YAML of file, whose content data SOPS
	// encrypted, and the JSON pointers of the values it decrypted. The
	// plain YAML holds the documents, keys and list items of data in
	// their order; each pointer starts with the index of its document
	// ("/0/spec/patch" is spec.patch of the first document). Its error
	// names file, says what is wrong (no identity matches the file's
	// recipients, a MAC mismatch, malformed metadata) and never holds a
	// decrypted value.
	Decrypt(file string, data []byte) (plain []byte, encrypted []string, err error)
}

// EncryptedValue is what every copy of a decrypted value that leaves the
// server's memory shows instead of it (the API, the store, previews,
// diffs, logs).
const EncryptedValue = "<encrypted>"

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.MaxFileSize <= 0 {
		r.MaxFileSize = DefaultMaxFileSize
	}
	if r.MaxTreeSize <= 0 {
		r.MaxTreeSize = DefaultMaxTreeSize
	}
	if r.MaxDepth <= 0 {
		r.MaxDepth = DefaultMaxDepth
	}
	return r
}

// Desired is the desired state that a tree of manifests declares.
type Desired struct {
	Tenants []*TenantDesired `json:"tenants"` // sorted by name
	Skipped int              `json:"skipped"` // documents of other apiVersions, skipped
	Files   int              `json:"files"`   // manifest files read
	// Undecrypted counts the SOPS-encrypted files read without
	// Options.Decrypt: checked except for their encrypted values.
	Undecrypted int `json:"undecrypted,omitempty"`
}

// Tenant returns the tenant named name, or nil.
func (d *Desired) Tenant(name string) *TenantDesired {
	i, ok := slices.BinarySearchFunc(d.Tenants, name, func(t *TenantDesired, name string) int {
		return strings.Compare(t.Tenant.Metadata.Name, name)
	})
	if !ok {
		return nil
	}
	return d.Tenants[i]
}

// TenantDesired is one tenant with the node groups and config patches that
// name it.
type TenantDesired struct {
	Tenant     *Tenant        `json:"tenant"`
	NodeGroups []*NodeGroup   `json:"nodeGroups"` // sorted by name
	Patches    []*ConfigPatch `json:"patches"`    // sorted by name
}

// Load reads every manifest under root in fsys and returns the desired state
// they declare.
//
// Manifests are the files named *.yaml or *.yml under root, read in sorted
// path order; a file may hold several documents separated by "---". Files and
// directories whose names start with "." are skipped, and symbolic links are
// never followed. Documents of other apiVersions are skipped and counted.
//
// When anything is wrong, Load returns a nil desired state and a
// *ProblemList holding every problem it found, sorted by file, line and
// column. Any other error means the schemas themselves could not be compiled.
// A tree without manifests is not a problem: it declares no tenants.
func Load(fsys fs.FS, root string, opts *Options) (desired *Desired, err error) {
	o := opts.withDefaults()
	defer func() {
		if r := recover(); r != nil {
			desired = nil
			err = &ProblemList{Problems: []Problem{{File: root, Message: fmt.Sprintf("internal error while loading manifests: %v", r)}}}
		}
	}()
	kinds, err := compiledSchemas()
	if err != nil {
		return nil, fmt.Errorf("compile manifest schemas: %w", err)
	}
	l := &loader{fsys: fsys, opts: o, kinds: kinds, patches: &patchChecker{maxDepth: o.MaxDepth}, cache: o.Cache}
	if l.cache != nil {
		l.load = l.cache.begin(o)
		l.store = l.cache.storeFor(o)
		defer l.cache.end(l.load, l.store)
	}
	files := l.collect(root)
	l.store.dropStale()
	results := l.process(files)
	if l.listings != nil {
		l.listings.keep()
	}
	undecrypted := 0
	for _, r := range results {
		l.problems = append(l.problems, r.problems...)
		l.skipped += r.skipped
		if r.undecrypted {
			undecrypted++
		}
	}
	d := l.assemble(files, results)
	if len(l.problems) > 0 {
		return nil, &ProblemList{Problems: capProblems(sortProblems(l.problems))}
	}
	d.Files = len(files)
	d.Skipped = l.skipped
	d.Undecrypted = undecrypted
	return d, nil
}

type loader struct {
	fsys     fs.FS
	opts     Options
	kinds    map[string]*kindSchema
	problems []Problem
	skipped  int
	patches  *patchChecker
	cache    *Cache    // nil: nothing is cached
	load     uint64    // this Load's number in cache
	listings *lister   // the directory listings find made, kept once the files are processed
	store    *storeUse // nil: the cache has no store, or not for these options
}

// manifestFile is a file read from the tree, not yet parsed, or found in
// the cache.
type manifestFile struct {
	name   string
	data   []byte
	hash   string      // its content hash, when there is a cache
	cached *cacheEntry // what the cache holds of it, or nil
	stored []byte      // what the cache's store holds of it, or nil
	size   int64       // its size, for a stored file, which is not read
}

func (l *loader) problem(file string, format string, args ...any) {
	l.problems = append(l.problems, Problem{File: displayPath(file), Message: fmt.Sprintf(format, args...)})
}

func isManifestName(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// collect walks the tree under root and reads every manifest file, within
// the size limits.
func (l *loader) collect(root string) []manifestFile {
	if root == "" {
		root = "."
	}
	if !fs.ValidPath(root) {
		l.problem(root, "manifest path %q is not a valid path inside the repository (it must be relative, slash-separated, without \"..\")", root)
		return nil
	}
	return l.readFound(l.find(root))
}

// found is what find saw of the manifest files under a root, sorted by
// path.
type found struct {
	files []listedFile
}

// find walks the tree under root for the manifest files, reporting the
// entries that cannot be manifests, and looks each up in the cache by the
// content hash the file system knows. A directory whose tree hash the
// cache has a listing for is not walked: its files come from the listing.
func (l *loader) find(root string) *found {
	f := &found{files: make([]listedFile, 0, l.cache.lastFiles())}
	w := newLister(l)
	walkErr := fs.WalkDir(l.fsys, root, func(name string, d fs.DirEntry, err error) error {
		n := len(l.problems)
		res := l.visit(root, name, d, err, f, w)
		if len(l.problems) != n {
			w.taint(name)
		}
		return res
	})
	if walkErr != nil {
		l.problem(root, "cannot walk manifest path: %v", walkErr)
	}
	l.listings = w
	byName := func(a, b listedFile) int { return strings.Compare(a.name, b.name) }
	if !slices.IsSortedFunc(f.files, byName) {
		slices.SortFunc(f.files, byName)
	}
	return f
}

// visit is find's step at one entry of the tree.
func (l *loader) visit(root, name string, d fs.DirEntry, err error, f *found, w *lister) error {
	if err != nil {
		if name == root {
			if errors.Is(err, fs.ErrNotExist) {
				l.problem(root, "manifest path %s does not exist", root)
			} else {
				l.problem(root, "cannot read manifest path: %v", err)
			}
			return fs.SkipAll
		}
		l.problem(name, "cannot read: %v", err)
		return nil
	}
	base := d.Name()
	if name != root && strings.HasPrefix(base, ".") {
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	t := d.Type()
	switch {
	case d.IsDir():
		n := len(f.files)
		if files, ok := w.enter(name, f.files); ok {
			for i := n; i < len(files); i++ {
				files[i] = l.withEntry(files[i])
			}
			f.files = files
			return fs.SkipDir
		}
		return nil
	case t&fs.ModeSymlink != 0:
		l.symlink(root, name, base)
		return nil
	case !isManifestName(base):
		return nil
	case nameProblem(name) != "":
		l.problem(name, "%s", nameProblem(name))
		return nil
	case !t.IsRegular():
		l.problem(name, "is not a regular file but a %s; manifests must be regular files", fileTypeName(t))
		return nil
	}
	lf := listedFile{name: name}
	if h, ok := l.contentHash(name); ok {
		lf.hash = h
		if lf = l.withEntry(lf); lf.cached != nil {
			f.files = append(f.files, lf)
			w.file(lf)
			return nil
		}
		if v, size, ok := l.stored(name, h); ok {
			lf.size = size
			w.file(lf)
			lf.stored = v
			f.files = append(f.files, lf)
			return nil
		}
	}
	info, err := d.Info()
	if err != nil {
		l.problem(name, "cannot read: %v", err)
		return nil
	}
	if !info.Mode().IsRegular() {
		l.problem(name, "is not a regular file but a %s; manifests must be regular files", fileTypeName(info.Mode().Type()))
		return nil
	}
	lf.size = info.Size()
	f.files = append(f.files, lf)
	w.file(lf)
	return nil
}

// stored returns what the cache's store holds of a file that the cache
// does not, and the file's size.
func (l *loader) stored(name, hash string) ([]byte, int64, bool) {
	if l.store == nil || !validStoreKey(name, hash) {
		return nil, 0, false
	}
	v := l.cache.store.Get(storeKey(name, hash))
	size, ok := storedSize(v)
	return v, size, ok
}

// withEntry looks a file with a content hash up in the cache, unless its
// entry is known, and takes its size from the entry.
func (l *loader) withEntry(lf listedFile) listedFile {
	if lf.cached == nil && lf.hash != "" {
		lf.cached = l.cache.get(l.load, lf.name, lf.hash)
	}
	if lf.cached != nil {
		lf.size = lf.cached.size
	}
	return lf
}

// lister makes the directory listings of one find, for a file system that
// knows tree hashes and a cache to keep them in, and takes the files of a
// directory from the cache when it has its listing.
type lister struct {
	l      *loader
	hasher TreeHasher // nil: no listings
	open   map[string]*openListing
}

// openListing is a listing being made: the directory's key, and whether
// find reported a problem under it, which keeps it out of the cache.
type openListing struct {
	key     cacheKey
	d       *dirListing
	tainted bool
}

func newLister(l *loader) *lister {
	w := &lister{l: l, open: map[string]*openListing{}}
	if h, ok := l.fsys.(TreeHasher); ok && l.cache != nil {
		w.hasher = h
	}
	return w
}

// enter is called at each directory find walks into. When the cache has
// the directory's listing, it appends the files under it to files and
// returns true, and the directory is not walked; otherwise it starts a
// listing of it.
func (w *lister) enter(dir string, files []listedFile) ([]listedFile, bool) {
	if w.hasher == nil {
		return files, false
	}
	h, ok := w.hasher.TreeHash(dir)
	if !ok {
		return files, false
	}
	key := cacheKey{dir, h}
	parent := w.open[path.Dir(dir)]
	if dir == "." {
		parent = nil
	}
	if parent != nil {
		parent.d.dirs = append(parent.d.dirs, key)
	}
	if files, ok := w.l.cache.listing(w.l.load, key, files); ok {
		return files, true
	}
	w.open[dir] = &openListing{key: key, d: &dirListing{}}
	return files, false
}

// file adds a manifest file to the listing of its directory.
func (w *lister) file(lf listedFile) {
	if o := w.open[path.Dir(lf.name)]; o != nil {
		o.d.files = append(o.d.files, lf)
	}
}

// taint keeps the directory of name, and every one above it, out of the
// cache: find reported a problem there, which only a walk reports again.
func (w *lister) taint(name string) {
	for dir := name; ; dir = path.Dir(dir) {
		if o := w.open[dir]; o != nil {
			o.tainted = true
		}
		if dir == "." || dir == "/" {
			return
		}
	}
}

// keep puts the listings made without a problem into the cache, once the
// cache has an entry for each of their files.
func (w *lister) keep() {
	for _, o := range w.open {
		if !o.tainted {
			w.l.cache.putDir(w.l.load, o.key, o.d)
		}
	}
}

// readFound reads the files find found, in order, within the size limits
// of one file and of the tree; a file the cache has is not read again.
func (l *loader) readFound(f *found) []manifestFile {
	files := make([]manifestFile, 0, len(f.files))
	var total int64
	for _, lf := range f.files {
		name, size := lf.name, lf.size
		if size > l.opts.MaxFileSize {
			l.problem(name, "file is %d bytes, more than the limit of %d bytes for one manifest file", size, l.opts.MaxFileSize)
			continue
		}
		total += size
		if total > l.opts.MaxTreeSize {
			l.problem(name, "the manifest files add up to more than the limit of %d bytes for the whole tree; this file and the ones after it were not read", l.opts.MaxTreeSize)
			break
		}
		if l.store != nil && l.store.retain && validStoreKey(name, lf.hash) {
			l.store.record(storeKey(name, lf.hash), nil)
		}
		if lf.stored != nil {
			files = append(files, manifestFile{name: name, hash: lf.hash, stored: lf.stored, size: size})
			continue
		}
		if lf.cached != nil {
			files = append(files, manifestFile{name: name, hash: lf.hash, cached: lf.cached})
			continue
		}
		data, err := l.read(name)
		if err != nil {
			l.problem(name, "%v", err)
			continue
		}
		// The size a file system reports may be wrong; count what was read.
		total += int64(len(data)) - size
		files = append(files, l.lookup(manifestFile{name: name, data: data, hash: lf.hash}))
	}
	return files
}

// contentHash returns the hash the file system knows of name, when there
// is a cache to look it up in.
func (l *loader) contentHash(name string) (string, bool) {
	h, ok := l.fsys.(ContentHasher)
	if l.cache == nil || !ok {
		return "", false
	}
	return h.ContentHash(name)
}

// lookup hashes a file read from a file system that knows no hashes, and
// looks it up in the cache.
func (l *loader) lookup(f manifestFile) manifestFile {
	if l.cache == nil || f.hash != "" {
		return f
	}
	f.hash = sha256Hash(f.data)
	if f.cached = l.cache.get(l.load, f.name, f.hash); f.cached != nil {
		f.data = nil
	}
	return f
}

// read reads one file, refusing more than the per-file limit whatever size
// the file system reported.
func (l *loader) read(name string) ([]byte, error) {
	f, err := l.fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, l.opts.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if int64(len(data)) > l.opts.MaxFileSize {
		return nil, fmt.Errorf("file is more than the limit of %d bytes for one manifest file", l.opts.MaxFileSize)
	}
	return data, nil
}

// symlink reports a symbolic link that a manifest might be behind. Links are
// never followed: one that leaves the tree could expose files outside the
// repository, and one inside it would declare its target twice. Links to
// other kinds of files are ignored.
func (l *loader) symlink(root, name, base string) {
	target, err := fs.ReadLink(l.fsys, name)
	if err != nil {
		if isManifestName(base) {
			l.problem(name, "is a symbolic link; manifests must be regular files, and links are not followed")
		}
		return
	}
	resolved := target
	if !path.IsAbs(target) {
		resolved = path.Join(path.Dir(name), target)
	}
	leaves := path.IsAbs(target) || !within(root, resolved)
	isDir := false
	if st, err := fs.Stat(l.fsys, name); err == nil && st.IsDir() {
		isDir = true
	}
	switch {
	case !isManifestName(base) && !isDir:
		return
	case leaves && isDir:
		l.problem(name, "is a symbolic link to %s, a directory outside the manifest tree; links are not followed, so manifests there would be ignored", target)
	case leaves:
		l.problem(name, "is a symbolic link to %s, which leaves the manifest tree; manifests must be regular files inside it", target)
	case isDir:
		l.problem(name, "is a symbolic link to the directory %s; links are not followed, so move the manifests here or remove the link", target)
	default:
		l.problem(name, "is a symbolic link to %s; links are not followed, so replace it with the file itself or remove it", target)
	}
}

// within reports whether the clean slash path p is root or below it.
func within(root, p string) bool {
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	if root == "." {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func fileTypeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	case t&fs.ModeIrregular != 0:
		return "irregular file"
	}
	return "special file"
}

// process parses and validates the files, in parallel; results keep the
// order of files. It lets go of each file's bytes once they are parsed.
func (l *loader) process(files []manifestFile) []*fileResult {
	results := make([]*fileResult, len(files))
	var todo []int
	for i, f := range files {
		if f.cached != nil {
			results[i] = f.cached.result
		} else {
			todo = append(todo, i)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	load := func(i int) {
		results[i] = l.loadCached(files[i])
		files[i].data, files[i].stored = nil, nil
	}
	if workers <= 1 {
		for _, i := range todo {
			load(i)
		}
		return results
	}
	var (
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				load(i)
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

// loadCached loads one file and keeps the result in the cache, and in its
// store. A file the store holds is decoded instead; one whose stored value
// does not decode is read and parsed.
func (l *loader) loadCached(f manifestFile) *fileResult {
	if f.stored != nil {
		if r, ok := decodeResult(f.name, f.stored); ok {
			l.cache.put(l.load, f.name, f.hash, f.size, r, false)
			return r
		}
		data, err := l.read(f.name)
		if err != nil {
			return &fileResult{problems: []Problem{{File: displayPath(f.name), Message: err.Error()}}}
		}
		f.data, f.stored = data, nil
	}
	r := l.loadFile(f)
	if l.cache != nil {
		l.cache.put(l.load, f.name, f.hash, int64(len(f.data)), r, true)
	}
	if l.store != nil && validStoreKey(f.name, f.hash) {
		v, _ := encodeResult(r, int64(len(f.data)))
		l.store.record(storeKey(f.name, f.hash), v)
	}
	return r
}

// fileResult is what one file holds: its problems, the documents of our
// kinds, and how many documents of other apiVersions it skipped.
type fileResult struct {
	problems []Problem
	docs     []*document
	skipped  int
	// sops is set for a SOPS-encrypted file, whose result never goes to
	// the cache's store (it may hold decrypted values); undecrypted when
	// it was read without Options.Decrypt.
	sops, undecrypted bool
}

// loadFile parses one file and checks each of its documents on its own.
// Checks across documents come later, in assemble.
func (l *loader) loadFile(f manifestFile) (r *fileResult) {
	r = &fileResult{}
	defer func() {
		if p := recover(); p != nil {
			r.problems = append(r.problems, Problem{File: f.name, Message: fmt.Sprintf("internal error while reading this file: %v", p)})
		}
	}()
	if !utf8.Valid(f.data) {
		line, col := invalidUTF8At(f.data)
		r.problems = append(r.problems, Problem{File: f.name, Line: line, Column: col, Message: "file is not UTF-8 text: invalid byte sequence"})
		return r
	}
	docs, err := parseDocuments(f.data)
	if err != nil {
		r.problems = append(r.problems, syntaxProblem(f.name, f.data, err))
	}
	if err == nil && len(docs) == 0 {
		r.problems = append(r.problems, Problem{File: f.name, Line: 1, Column: 1, Message: "file holds no YAML document; an empty manifest file is most likely a mistake (remove the file to declare nothing)"})
		return r
	}
	if err == nil && isSOPS(docs) {
		l.loadSOPS(f, docs, r)
		return r
	}
	budget := aliasBudget(docs)
	for _, n := range docs {
		l.addDocument(r, f.name, n, budget, nil)
	}
	return r
}

// addDocument checks one document of a file and adds what it yields to
// the file's result; sd tells its encrypted values, in a SOPS file.
func (l *loader) addDocument(r *fileResult, file string, n *yaml.Node, budget *int, sd *sopsDoc) {
	doc, problems, skipped := l.loadDocument(file, n, budget, sd)
	r.problems = append(r.problems, problems...)
	if skipped {
		r.skipped++
	}
	if doc != nil {
		r.docs = append(r.docs, doc)
	}
}

// invalidUTF8At returns the line and column (in bytes) of the first byte
// that is not valid UTF-8.
func invalidUTF8At(data []byte) (int, int) {
	line, col := 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return line, col
}
