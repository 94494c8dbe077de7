package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// TestRecheckSameAsWholeLoad: a cache that rechecks across documents only
// the files that changed gives, for each of a series of changes, the
// desired state, or the problems at the same file:line, of a load without
// a cache; and it rechecks (CacheStats.Rechecked) where nothing is wrong.
func TestRecheckSameAsWholeLoad(t *testing.T) {
	fsys := genTree(12)
	cache := NewCache(0)
	set := func(name, data string) { fsys[name] = &fstest.MapFile{Mode: 0o644, Data: []byte(data)} }
	edit := func(name, old, new string) {
		t.Helper()
		s := string(fsys[name].Data)
		if !strings.Contains(s, old) {
			t.Fatalf("%s holds no %q", name, old)
		}
		set(name, strings.ReplaceAll(s, old, new))
	}
	move := func(from, to string) { fsys[to] = fsys[from]; delete(fsys, from) }
	steps := []struct {
		what     string
		change   func()
		recheck  bool // the cache's load must recheck only the change
		problems bool
	}{
		{"first load", func() {}, false, false},
		{"a count", func() { edit("t003/nodegroups.yaml", "count: 1", "count: 5") }, true, false},
		{"a new tenant", func() {
			for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
				set("t100/"+f, strings.ReplaceAll(string(fsys["t004/"+f].Data), "t004", "t100"))
			}
		}, true, false},
		{"a tenant removed", func() {
			for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
				delete(fsys, "t005/"+f)
			}
		}, true, false},
		{"a file renamed", func() { move("t006/patches.yaml", "t006/a-patches.yaml") }, true, false},
		{"a file moved to another directory", func() { move("t006/a-patches.yaml", "zz/t006-patches.yaml") }, true, false},
		{"node groups moved to another tenant", func() {
			edit("t007/nodegroups.yaml", "tenant: t007", "tenant: t008")
			edit("t008/nodegroups.yaml", "name: controlplane", "name: cp2")
			edit("t008/nodegroups.yaml", "name: workers", "name: w2")
		}, true, false},
		{"a missing tenant", func() { edit("t009/nodegroups.yaml", "tenant: t009", "tenant: t0099") }, false, true},
		{"fixed", func() { edit("t009/nodegroups.yaml", "tenant: t0099", "tenant: t009") }, false, false},
		{"a tenant declared twice", func() { set("t010/again.yaml", string(fsys["t002/tenant.yaml"].Data)) }, false, true},
		{"fixed again", func() { delete(fsys, "t010/again.yaml") }, false, false},
		{"a config patch declared twice", func() {
			edit("t001/patches.yaml", "name: patch-3", "name: patch-2")
		}, true, true},
		{"a tenant renamed with its manifests", func() {
			fsys["t001/patches.yaml"] = genTree(12)["t001/patches.yaml"]
			for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
				edit("t011/"+f, "t011", "renamed")
			}
		}, false, false}, // the load before had a problem: nothing was kept
		{"another tenant renamed with its manifests", func() {
			for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
				edit("t010/"+f, "t010", "renamed2")
			}
		}, true, false},
		{"a tenant gone, its node groups left", func() { delete(fsys, "t002/tenant.yaml") }, true, true},
		{"the tenant back in another file", func() { set("t002/b.yaml", string(genTree(3)["t002/tenant.yaml"].Data)) }, false, false},
		{"nothing changed", func() {}, true, false},
	}
	for i, s := range steps {
		s.change()
		before := cache.Stats().Rechecked
		got, gotErr := Load(fsys, ".", &Options{Cache: cache})
		want, wantErr := Load(fsys, ".", nil)
		if problems(t, gotErr) != problems(t, wantErr) {
			t.Fatalf("step %d (%s): problems with the cache\n%s\nwithout\n%s", i, s.what, problems(t, gotErr), problems(t, wantErr))
		}
		if (wantErr != nil) != s.problems {
			t.Fatalf("step %d (%s): problems %v, want %v", i, s.what, wantErr, s.problems)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Fatalf("step %d (%s): desired state with the cache differs from the one without", i, s.what)
		}
		if rechecked := cache.Stats().Rechecked > before; s.recheck && !s.problems && !rechecked {
			t.Errorf("step %d (%s): the load checked every document again", i, s.what)
		}
	}
}

func problems(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var list *ProblemList
	if !errors.As(err, &list) {
		t.Fatalf("load: %v", err)
	}
	var b strings.Builder
	for _, p := range list.Problems {
		fmt.Fprintf(&b, "%s:%d:%d %s %s\n", p.File, p.Line, p.Column, p.Path, p.Message)
	}
	return b.String()
}
