package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/examples"
)

var update = flag.Bool("update", false, "rewrite testdata/examples.golden.json")

type goldenObject struct {
	Object any    `json:"object"`
	Source Source `json:"source"`
}

type goldenTenant struct {
	Tenant     goldenObject   `json:"tenant"`
	NodeGroups []goldenObject `json:"nodeGroups"`
	Patches    []goldenObject `json:"patches"`
}

// goldenDump renders a desired state as JSON, with the source of every
// object, which the objects' own JSON leaves out.
func goldenDump(t *testing.T, d *Desired) []byte {
	t.Helper()
	out := struct {
		Files   int            `json:"files"`
		Skipped int            `json:"skipped"`
		Tenants []goldenTenant `json:"tenants"`
	}{Files: d.Files, Skipped: d.Skipped}
	for _, td := range d.Tenants {
		gt := goldenTenant{Tenant: goldenObject{td.Tenant, td.Tenant.Source}}
		for _, g := range td.NodeGroups {
			gt.NodeGroups = append(gt.NodeGroups, goldenObject{g, g.Source})
		}
		for _, p := range td.Patches {
			gt.Patches = append(gt.Patches, goldenObject{p, p.Source})
		}
		out.Tenants = append(out.Tenants, gt)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

func loadExamples(t testing.TB) *Desired {
	t.Helper()
	d, err := Load(examples.SimOnly(os.DirFS(".."), "examples"), "examples", nil)
	if err != nil {
		t.Fatalf("Load(examples): %v", err)
	}
	return d
}

// TestExamplesGolden loads examples/ and compares what it declares with
// testdata/examples.golden.json; -update rewrites the golden file.
func TestExamplesGolden(t *testing.T) {
	got := goldenDump(t, loadExamples(t))
	golden := filepath.Join("testdata", "examples.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestExamplesGolden -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("examples differ from %s (-want +got):\n%s", golden, diff)
	}
}

// TestExamplesContent checks the facts that the demo and the other packages
// rely on, independently of the golden file.
func TestExamplesContent(t *testing.T) {
	d := loadExamples(t)
	if d.Files != 6 || d.Skipped != 0 || len(d.Tenants) != 2 {
		t.Fatalf("files=%d skipped=%d tenants=%d, want 6, 0, 2", d.Files, d.Skipped, len(d.Tenants))
	}
	prod, staging := d.Tenant("production"), d.Tenant("staging")
	if prod == nil || staging == nil || d.Tenant("nope") != nil {
		t.Fatalf("Tenant lookup: production=%v staging=%v", prod, staging)
	}
	counts := func(td *TenantDesired) map[string]int {
		m := map[string]int{}
		for _, g := range td.NodeGroups {
			if g.Spec.ProviderClass != ProviderSim {
				t.Errorf("%s: providerClass %q", g.Metadata.Name, g.Spec.ProviderClass)
			}
			if g.Tenant() != td.Tenant.Metadata.Name {
				t.Errorf("%s belongs to %q", g.Metadata.Name, g.Tenant())
			}
			m[g.Role()] += g.Spec.Count
		}
		return m
	}
	if got := counts(prod); got[RoleControlPlane] != 3 || got[RoleWorker] != 2 {
		t.Errorf("production machines by role = %v, want 3 controlplane, 2 worker", got)
	}
	if got := counts(staging); got[RoleControlPlane] != 1 || got[RoleWorker] != 1 {
		t.Errorf("staging machines by role = %v, want 1 controlplane, 1 worker", got)
	}
	if v := prod.Tenant.Spec.TalosVersion; v != "1.12.6" {
		t.Errorf("talosVersion = %q", v)
	}
	var wide, targeted bool
	for _, p := range prod.Patches {
		wide = wide || p.Spec.TargetRole == ""
		targeted = targeted || p.Spec.TargetRole == RoleControlPlane
	}
	if !wide || !targeted || len(prod.Tenant.Spec.ConfigPatches) == 0 {
		t.Errorf("production lacks a tenant-wide, a role-targeted or a spec patch")
	}
	// A patch written as a mapping arrives as YAML text.
	workers := prod.NodeGroups[1]
	if workers.Metadata.Name != "workers" || len(workers.Spec.ConfigPatches) != 1 {
		t.Fatalf("production node groups out of order or without patch: %+v", workers.Metadata)
	}
	want := "machine:\n  nodeLabels:\n    node.example.internal/pool: general\n"
	if got := workers.Spec.ConfigPatches[0].Patch; got != want {
		t.Errorf("mapping patch as text = %q, want %q", got, want)
	}
	// Sources point at the manifests.
	src := workers.Source
	if src.File != "examples/production/nodegroups.yaml" || src.Line != 15 {
		t.Errorf("workers source = %s:%d", src.File, src.Line)
	}
	if got := src.LineOf("/spec/providerConfig/shape"); got != 26 {
		t.Errorf("LineOf(/spec/providerConfig/shape) = %d, want 26", got)
	}
	if got := src.LineOf("/spec/providerConfig/missing/deeper"); got != 25 {
		t.Errorf("LineOf of an absent key = %d, want 25 (its nearest ancestor)", got)
	}
	if got := src.LineOf(JSONPointer("metadata", "labels", LabelRole)); got != 21 {
		t.Errorf("LineOf(role label) = %d, want 21", got)
	}
	if got := (Source{Line: 7}).LineOf("/x/y"); got != 7 {
		t.Errorf("LineOf without lines = %d, want 7", got)
	}
}

// TestExamplesEditorSchemaLines checks that every example names the JSON
// Schema of its kind on its first line, with a path that exists.
func TestExamplesEditorSchemaLines(t *testing.T) {
	d := loadExamples(t)
	check := func(file, kind string) {
		data, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		ref, ok := strings.CutPrefix(first, "# yaml-language-server: $schema=")
		if !ok {
			t.Errorf("%s: first line %q names no schema", file, first)
			return
		}
		if filepath.Base(ref) != SchemaFile(kind) {
			t.Errorf("%s: schema %s, want %s", file, ref, SchemaFile(kind))
		}
		if _, err := os.Stat(filepath.Join("..", filepath.Dir(file), ref)); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	for _, td := range d.Tenants {
		check(td.Tenant.Source.File, KindTenant)
		for _, g := range td.NodeGroups {
			check(g.Source.File, KindNodeGroup)
		}
		for _, p := range td.Patches {
			check(p.Source.File, KindConfigPatch)
		}
	}
}

const validTenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: prod
spec:
  kubernetesVersion: v1.34.1
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://prod.example.internal:6443
  podNetwork: ["10.244.0.0/16", "FD00:10:244::/56"]
`

func mapFS(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for name, data := range files {
		m[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	return m
}

func problemsOf(t *testing.T, d *Desired, err error) []Problem {
	t.Helper()
	var list *ProblemList
	if !errors.As(err, &list) {
		t.Fatalf("Load error = %v, want a *ProblemList", err)
	}
	if d != nil {
		t.Error("Load returned a desired state along with problems")
	}
	return list.Problems
}

func wantOneProblem(t *testing.T, d *Desired, err error, file, substr string) Problem {
	t.Helper()
	ps := problemsOf(t, d, err)
	if len(ps) != 1 || ps[0].File != file || !strings.Contains(ps[0].Message, substr) {
		t.Fatalf("problems = %v, want one in %s containing %q", ps, file, substr)
	}
	return ps[0]
}

func TestLoadCanonicalForms(t *testing.T) {
	d, err := Load(mapFS(map[string]string{"t.yaml": validTenant}), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Tenants[0].Tenant.Spec
	if spec.KubernetesVersion != "1.34.1" {
		t.Errorf("kubernetesVersion = %q, want the leading v dropped", spec.KubernetesVersion)
	}
	if want := []string{"10.244.0.0/16", "fd00:10:244::/56"}; !reflect.DeepEqual(spec.PodNetwork, want) {
		t.Errorf("podNetwork = %q, want %q", spec.PodNetwork, want)
	}
}

func TestLoadSkipsOtherAPIVersionsAndHiddenFiles(t *testing.T) {
	fsys := mapFS(map[string]string{
		"m/tenant.yml":             validTenant + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"m/kustomization.yaml":     "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
		"m/notes.txt":              "not yaml: [",
		"m/.git/config.yaml":       "broken: [",
		"m/.hidden.yaml":           "broken: [",
		"m/sub/.cache/x.yaml":      "broken: [",
		"m/Tenant.YAML":            "broken: [",
		"outside/other-tree.yaml":  "broken: [",
		"m/sub/deeper/groups.yaml": "# only skipped documents here\napiVersion: apps/v1\nkind: Deployment\n",
	})
	d, err := Load(fsys, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Files != 3 || d.Skipped != 3 || len(d.Tenants) != 1 {
		t.Errorf("files=%d skipped=%d tenants=%d, want 3, 3, 1", d.Files, d.Skipped, len(d.Tenants))
	}
	if f := d.Tenants[0].Tenant.Source.File; f != "m/tenant.yml" {
		t.Errorf("source file %q", f)
	}
}

// TestLoadNoPartialState: one broken file among good ones yields no desired
// state at all, so that nothing the good files leave out looks deleted.
func TestLoadNoPartialState(t *testing.T) {
	fsys := mapFS(map[string]string{
		"a.yaml": validTenant,
		"b.yaml": strings.Replace(validTenant, "name: prod", "name: dev", 1) + "  oops: [\n",
	})
	d, err := Load(fsys, ".", nil)
	p := wantOneProblem(t, d, err, "b.yaml", "YAML syntax error")
	if p.Line != 10 {
		t.Errorf("line %d, want 10", p.Line)
	}
}

func TestLoadEmptyTree(t *testing.T) {
	d, err := Load(mapFS(map[string]string{"README.md": "# nothing"}), ".", nil)
	if err != nil || d == nil || len(d.Tenants) != 0 || d.Files != 0 {
		t.Fatalf("Load(empty tree) = %+v, %v", d, err)
	}
}

func TestLoadRoot(t *testing.T) {
	fsys := mapFS(map[string]string{"m/t.yaml": validTenant})
	d, err := Load(fsys, "nope", nil)
	wantOneProblem(t, d, err, "nope", "manifest path nope does not exist")
	d, err = Load(fsys, "../m", nil)
	wantOneProblem(t, d, err, "../m", "is not a valid path")
	if d, err := Load(fsys, "m/t.yaml", nil); err != nil || len(d.Tenants) != 1 {
		t.Errorf("Load of a single file = %v, %v", d, err)
	}
	if d, err := Load(fsys, "", nil); err != nil || len(d.Tenants) != 1 {
		t.Errorf(`Load with root "" = %v, %v`, d, err)
	}
}

func TestLoadFileSizeLimit(t *testing.T) {
	big := validTenant + "# " + strings.Repeat("x", 200) + "\n"
	fsys := mapFS(map[string]string{"a.yaml": validTenant, "big.yaml": big})
	d, err := Load(fsys, ".", &Options{MaxFileSize: 400})
	p := wantOneProblem(t, d, err, "big.yaml", "more than the limit of 400 bytes for one manifest file")
	if p.Line != 0 {
		t.Errorf("line %d, want 0 for a whole-file problem", p.Line)
	}
	if _, err := Load(fsys, ".", &Options{MaxFileSize: int64(len(big))}); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("at the limit the file must be read: %v", err)
	}
	// The default is 1 MiB.
	huge := validTenant + "# " + strings.Repeat("x", DefaultMaxFileSize) + "\n"
	d, err = Load(mapFS(map[string]string{"huge.yaml": huge}), ".", nil)
	wantOneProblem(t, d, err, "huge.yaml", "limit of 1048576 bytes")
}

// lyingFS reports every file as empty, to check that the per-file limit
// holds whatever size the file system claims.
type lyingFS struct{ fstest.MapFS }

func (l lyingFS) Open(name string) (fs.File, error) {
	f, err := l.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return lyingFile{f}, nil
}

type lyingFile struct{ fs.File }

func (f lyingFile) Stat() (fs.FileInfo, error) {
	fi, err := f.File.Stat()
	return lyingInfo{fi}, err
}

func (f lyingFile) ReadDir(n int) ([]fs.DirEntry, error) {
	entries, err := f.File.(fs.ReadDirFile).ReadDir(n)
	for i, e := range entries {
		entries[i] = lyingEntry{e}
	}
	return entries, err
}

type lyingEntry struct{ fs.DirEntry }

func (e lyingEntry) Info() (fs.FileInfo, error) {
	fi, err := e.DirEntry.Info()
	return lyingInfo{fi}, err
}

type lyingInfo struct{ fs.FileInfo }

func (lyingInfo) Size() int64 { return 0 }

func TestLoadFileSizeLimitIgnoresClaimedSize(t *testing.T) {
	fsys := lyingFS{mapFS(map[string]string{"big.yaml": validTenant + strings.Repeat("#\n", 300)})}
	d, err := Load(fsys, ".", &Options{MaxFileSize: 400})
	wantOneProblem(t, d, err, "big.yaml", "more than the limit of 400 bytes")
}

func TestLoadTreeSizeLimit(t *testing.T) {
	files := map[string]string{}
	for _, name := range []string{"a", "b", "c", "d"} {
		files[name+".yaml"] = strings.Replace(validTenant, "name: prod", "name: "+name, 1)
	}
	limit := int64(3*len(validTenant) + 5)
	d, err := Load(mapFS(files), ".", &Options{MaxTreeSize: limit})
	wantOneProblem(t, d, err, "d.yaml", "more than the limit of")
	if _, err := Load(mapFS(files), ".", &Options{MaxTreeSize: 4 * int64(len(validTenant)+5)}); err != nil {
		t.Errorf("under the limit: %v", err)
	}
}

func TestLoadDepthOption(t *testing.T) {
	deep := strings.Replace(validTenant, "spec:\n", "  annotations:\n    a: b\nspec:\n", 1)
	deep = strings.Replace(deep, "metadata:\n", "metadata:\n  labels: {x: y}\n", 1)
	if _, err := Load(mapFS(map[string]string{"t.yaml": deep}), ".", &Options{MaxDepth: 3}); err != nil {
		t.Fatalf("depth 3 allowed: %v", err)
	}
	fsys := mapFS(map[string]string{"t.yaml": strings.Replace(validTenant, "spec:\n", "spec:\n  plugins: {cni: {type: x, values: {a: {b: c}}}}\n", 1)})
	d, err := Load(fsys, ".", &Options{MaxDepth: 4})
	p := wantOneProblem(t, d, err, "t.yaml", "nesting is deeper than 4 levels")
	if p.Path != "/spec/plugins/cni/values/a" {
		t.Errorf("path %q", p.Path)
	}
}

// TestLoadAliasBombQuickly: a "billion laughs" document is rejected in well
// under a second and a hundred megabytes.
func TestLoadAliasBombQuickly(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "bad", "alias-bomb", "tenant.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fsys := mapFS(map[string]string{"bomb.yaml": string(data)})
	var before, after runtimeMem
	before.read()
	start := time.Now()
	d, err := Load(fsys, ".", nil)
	elapsed := time.Since(start)
	after.read()
	wantOneProblem(t, d, err, "bomb.yaml", "aliases expand to too many nodes")
	allocated := after.totalAlloc - before.totalAlloc
	t.Logf("billion laughs rejected in %v, %d bytes allocated", elapsed, allocated)
	// Its time is measured by BenchmarkAliasBomb; tests assert no timings.
	if allocated > 100<<20 {
		t.Errorf("allocated %d bytes, want under 100 MB", allocated)
	}
}

func TestLoadAliasesAndMerges(t *testing.T) {
	const doc = `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: prod
    rezuscloud.io/role: worker
spec:
  count: 2
  providerClass: sim
  providerConfig:
    <<: [*base, *extra]
    shape: large
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: spare
  labels:
    rezuscloud.io/tenant: prod
    rezuscloud.io/role: worker
spec:
  count: 0
  providerClass: sim
  providerConfig: &base
    shape: small
    image: talos
    disk: &extra {size: 20, image: other, zone: a}
`
	// Within one document, merges follow YAML's rules.
	one := strings.Replace(doc[:strings.Index(doc, "---")], "  providerConfig:\n", "  providerConfig:\n    x: &base {shape: small, image: talos}\n    y: &extra {size: 20, image: other, zone: a}\n", 1)
	d, err := Load(mapFS(map[string]string{"t.yaml": validTenant, "g.yaml": one}), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := d.Tenants[0].NodeGroups[0]
	want := map[string]any{
		"shape": "large", "image": "talos", "size": float64(20), "zone": "a",
		"x": map[string]any{"shape": "small", "image": "talos"},
		"y": map[string]any{"size": float64(20), "image": "other", "zone": "a"},
	}
	if diff := cmp.Diff(want, g.Spec.ProviderConfig); diff != "" {
		t.Errorf("providerConfig (-want +got):\n%s", diff)
	}
	if line := g.Source.LineOf("/spec/providerConfig/shape"); line != 15 {
		t.Errorf("line of the explicit key = %d, want 15", line)
	}
	if line := g.Source.LineOf("/spec/providerConfig/zone"); line != 14 {
		t.Errorf("line of a merged key = %d, want 14 (the merge key's value)", line)
	}
}

func TestLoadUnknownAnchor(t *testing.T) {
	fsys := mapFS(map[string]string{"t.yaml": validTenant + "  serviceNetwork: *nets\n"})
	d, err := Load(fsys, ".", nil)
	p := wantOneProblem(t, d, err, "t.yaml", "alias *nets refers to no anchor")
	if p.Line != 10 || p.Column != 19 {
		t.Errorf("at %d:%d, want 10:19", p.Line, p.Column)
	}
}

// TestLoadSymlinksAndSpecialFiles makes what git cannot hold: links that
// leave the tree, links inside it, and a named pipe, which the loader must
// report without opening.
func TestLoadSymlinksAndSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{tree, outside, filepath.Join(tree, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(tree, "tenant.yaml"), validTenant)
	write(filepath.Join(outside, "secret.yaml"), "password: hunter2\n")
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("../outside/secret.yaml", "escape.yaml")
	link("/etc/hostname", "absolute.yml")
	link("../tenant.yaml", "sub/again.yaml")
	link("../outside", "more")
	link("sub", "alias-dir")
	link("tenant.yaml", "notes.txt")
	if err := syscall.Mkfifo(filepath.Join(tree, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var (
		d   *Desired
		err error
	)
	go func() {
		d, err = Load(os.DirFS(tree), ".", nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Load blocked, most likely opening the named pipe")
	}
	checkProblems(t, d, err, []expectation{
		{file: "absolute.yml", message: "is a symbolic link to /etc/hostname, which leaves the manifest tree"},
		{file: "alias-dir", message: "is a symbolic link to the directory sub; links are not followed"},
		{file: "escape.yaml", message: "is a symbolic link to ../outside/secret.yaml, which leaves the manifest tree"},
		{file: "more", message: "is a symbolic link to ../outside, a directory outside the manifest tree"},
		{file: "pipe.yaml", message: "is not a regular file but a named pipe"},
		{file: "sub/again.yaml", message: "is a symbolic link to ../tenant.yaml; links are not followed"},
	})

	// Loading a subdirectory: a link to its parent leaves that tree.
	d, err = Load(os.DirFS(dir), "tree/sub", nil)
	checkProblems(t, d, err, []expectation{
		{file: "tree/sub/again.yaml", message: "is a symbolic link to ../tenant.yaml, which leaves the manifest tree"},
	})
}

// noLinkFS hides ReadLink, as a file system of a git tree may.
type noLinkFS struct{ fs fs.FS }

func (n noLinkFS) Open(name string) (fs.File, error) { return n.fs.Open(name) }

func TestLoadSymlinkWithoutReadLink(t *testing.T) {
	m := mapFS(map[string]string{"tenant.yaml": validTenant})
	m["link.yaml"] = &fstest.MapFile{Data: []byte("tenant.yaml"), Mode: fs.ModeSymlink | 0o777}
	m["link.txt"] = &fstest.MapFile{Data: []byte("tenant.yaml"), Mode: fs.ModeSymlink | 0o777}
	d, err := Load(noLinkFS{m}, ".", nil)
	wantOneProblem(t, d, err, "link.yaml", "is a symbolic link; manifests must be regular files")
	// fstest.MapFS itself can read links.
	d, err = Load(m, ".", nil)
	wantOneProblem(t, d, err, "link.yaml", "is a symbolic link to tenant.yaml")
}

// TestLoadDeterministic loads a tree many times, in parallel, and expects the
// same desired state and the same problems every time.
func TestLoadDeterministic(t *testing.T) {
	good := genTree(20)
	bad := genTree(20)
	bad["t007/patches.yaml"] = &fstest.MapFile{Data: []byte("broken: [\n")}
	bad["t013/tenant.yaml"] = &fstest.MapFile{Data: bytes.Replace(bad["t013/tenant.yaml"].Data, []byte("1.34.1"), []byte("1.34"), 1)}
	first := func(fsys fs.FS) string {
		d, err := Load(fsys, ".", nil)
		if err != nil {
			return err.Error()
		}
		return string(goldenDump(t, d))
	}
	wantGood, wantBad := first(good), first(bad)
	if !strings.Contains(wantBad, "t007/patches.yaml:1: YAML syntax error") || !strings.Contains(wantBad, "t013/tenant.yaml:8:3") {
		t.Fatalf("problems of the broken tree:\n%s", wantBad)
	}
	for range 10 {
		if got := first(good); got != wantGood {
			t.Fatal("desired state differs between loads")
		}
		if got := first(bad); got != wantBad {
			t.Fatalf("problems differ between loads:\n%s\n%s", got, wantBad)
		}
	}
}

func TestProblemString(t *testing.T) {
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "a.yaml", Line: 3, Column: 5, Path: "/spec/count", Message: "bad"}, "a.yaml:3:5: /spec/count: bad"},
		{Problem{File: "a.yaml", Line: 3, Message: "bad"}, "a.yaml:3: bad"},
		{Problem{File: "a.yaml", Message: "bad"}, "a.yaml: bad"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
	l := &ProblemList{Problems: []Problem{{File: "a", Line: 1, Message: "x"}, {File: "b", Message: "y"}}}
	if got, want := l.Error(), "2 problems in manifests:\na:1: x\nb: y"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestPlanSummaryString(t *testing.T) {
	if got := (PlanSummary{Add: 3, Change: 1, Destroy: 0}).String(); got != "+3 ~1 -0" {
		t.Errorf("got %q", got)
	}
}

// TestLoadProblemsCapped: a file with thousands of mistakes reports the first
// hundred and how many more there are.
func TestLoadProblemsCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString(validTenant)
	for i := range 5000 {
		fmt.Fprintf(&b, "  unknown%04d: x\n", i)
	}
	d, err := Load(mapFS(map[string]string{"t.yaml": b.String(), "u.yaml": strings.Replace(validTenant, "prod", "other", 1) + "  extra: 1\n"}), ".", nil)
	ps := problemsOf(t, d, err)
	if len(ps) != 1+maxProblemsPerFile+1 {
		t.Fatalf("%d problems, want %d", len(ps), maxProblemsPerFile+2)
	}
	if ps[0].File != "t.yaml" || !strings.HasPrefix(ps[0].Message, "4900 more problems in this file are not shown") {
		t.Errorf("first problem %s", ps[0])
	}
	if ps[1].Line != 10 || !strings.Contains(ps[1].Message, `"unknown0000"`) || !strings.Contains(ps[100].Message, `"unknown0099"`) {
		t.Errorf("kept problems: %s ... %s", ps[1], ps[100])
	}
	if ps[101].File != "u.yaml" {
		t.Errorf("the other file's problem is missing: %s", ps[101])
	}
}

// TestLoadAliasAcrossDocuments: anchors stay defined from one document to
// the next, so many small documents that each expand one large anchor must
// exhaust the file's budget, not get a fresh one each.
func TestLoadAliasAcrossDocuments(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: example.com/v1\nkind: Data\nbig: &big\n")
	// 8,001 nodes: one document alone may expand it, many may not.
	for i := range 4000 {
		fmt.Fprintf(&b, "  k%d: v\n", i)
	}
	for i := range 5000 {
		fmt.Fprintf(&b, "---\napiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata: {name: t%d, labels: *big}\n", i)
	}
	d, err := Load(mapFS(map[string]string{"t.yaml": b.String()}), ".", nil)
	ps := problemsOf(t, d, err)
	found := false
	for _, p := range ps {
		found = found || strings.Contains(p.Message, "aliases expand to too many nodes")
	}
	if !found {
		t.Errorf("no alias budget problem among %d problems: %v", len(ps), ps[:min(len(ps), 5)])
	}
}

func TestLoadLongInputInMessages(t *testing.T) {
	long := "http://" + strings.Repeat("é", 5000)
	d, err := Load(mapFS(map[string]string{"t.yaml": strings.Replace(validTenant, "https://prod.example.internal:6443", long, 1)}), ".", nil)
	p := wantOneProblem(t, d, err, "t.yaml", "\"http://éé")
	if len(p.Message) > maxMessageLength || !strings.HasSuffix(p.Message, "...") || !utf8.ValidString(p.Message) {
		t.Errorf("message of %d bytes: %.80q", len(p.Message), p.Message)
	}
}

// TestLoadGuardKeepsNames: a document stopped by a guard still declares its
// name, so the node groups that name its tenant report nothing more.
func TestLoadGuardKeepsNames(t *testing.T) {
	bomb, err := os.ReadFile(filepath.Join("testdata", "bad", "alias-bomb", "tenant.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	group := `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels: {rezuscloud.io/tenant: prod, rezuscloud.io/role: worker}
spec: {count: 1, providerClass: sim}
`
	d, err := Load(mapFS(map[string]string{"t.yaml": string(bomb), "g.yaml": group}), ".", nil)
	wantOneProblem(t, d, err, "t.yaml", "aliases expand to too many nodes")
}

// TestLoadServiceAccountKey: the kind of service-account key a tenant
// asks for reaches its spec, and a tenant without the field has none.
func TestLoadServiceAccountKey(t *testing.T) {
	for _, want := range []string{"", ServiceAccountKeyECDSA, ServiceAccountKeyRSA} {
		doc := validTenant
		if want != "" {
			doc = strings.Replace(doc, "spec:\n", "spec:\n  serviceAccountKey: "+want+"\n", 1)
		}
		d, err := Load(mapFS(map[string]string{"t.yaml": doc}), ".", nil)
		if err != nil {
			t.Fatalf("serviceAccountKey %q: %v", want, err)
		}
		if got := d.Tenants[0].Tenant.Spec.ServiceAccountKey; got != want {
			t.Errorf("serviceAccountKey = %q, want %q", got, want)
		}
	}
}
