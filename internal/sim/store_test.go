package sim

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func spec(name string) Spec {
	return Spec{Name: name, Tenant: "acme", NodeGroup: "workers", Role: "worker",
		Shape: "small", Image: "talos-v1.12.6", UserData: []byte("machine:\n  token: s3cret\n")}
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "machines"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreateWritesPrivateRecordWithoutUserData(t *testing.T) {
	s := openStore(t)
	r, err := s.Create(spec("w-0"), t0)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidID(r.ID) || r.Address != s.Block().Prefix().Addr().Next().String() || r.Hostname != "acme-workers-"+r.ID[len(r.ID)-6:] {
		t.Fatalf("record: %+v", r)
	}
	if !r.CreatedAt.Equal(t0) || r.UserDataSHA256 != HashUserData(spec("").UserData) {
		t.Fatalf("record: %+v", r)
	}
	fi, err := os.Stat(s.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode: %v %v", fi.Mode(), err)
	}
	fi, err = os.Stat(s.Path(r.ID))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(s.Path(r.ID))
	if strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "token") {
		t.Fatalf("record holds user data:\n%s", b)
	}
	got, err := s.Get(r.ID)
	if err != nil || got != r {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, r)
	}
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}

// addrIn returns 127.B.x.y of the store's block.
func addrIn(s *Store, x, y int) string {
	return netip.AddrFrom4([4]byte{127, byte(s.Block()), byte(x), byte(y)}).String()
}

func TestCreateRejectsBadSpec(t *testing.T) {
	s := openStore(t)
	bad := spec("w-0")
	bad.NodeGroup = "Workers!"
	if _, err := s.Create(bad, t0); err == nil || !strings.Contains(err.Error(), `node_group "Workers!"`) {
		t.Fatalf("err = %v", err)
	}
	if rs, _ := s.List(); len(rs) != 0 {
		t.Fatalf("bad spec left %d records", len(rs))
	}
}

func TestAddressesReusedLowestFirstAndStable(t *testing.T) {
	s := openStore(t)
	var rs []Record
	for i := range 4 {
		r, err := s.Create(spec("w-"+string(rune('0'+i))), t0)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for i := range 4 {
		if want := addrIn(s, 0, i+1); rs[i].Address != want {
			t.Fatalf("machine %d: address %s, want %s", i, rs[i].Address, want)
		}
	}
	if err := s.Delete(rs[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(rs[1].ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.Get(rs[1].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
	up, err := s.SetShape(rs[2].ID, "large", false, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if up.Address != rs[2].Address || up.Shape != "large" || !up.CreatedAt.Equal(t0) || !up.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after SetShape: %+v", up)
	}
	n, err := s.Create(spec("w-9"), t0)
	if err != nil {
		t.Fatal(err)
	}
	if n.Address != addrIn(s, 0, 2) {
		t.Fatalf("new machine got %s, want the freed %s", n.Address, addrIn(s, 0, 2))
	}
}

func TestConcurrentCreatesGetDistinctAddresses(t *testing.T) {
	s := openStore(t)
	// A second Store value on the same directory stands in for a second
	// provider process: only the file lock keeps them apart.
	s2, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			st := s
			if i%2 == 1 {
				st = s2
			}
			if _, err := st.Create(spec("w"), t0); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Address] {
			t.Fatalf("address %s given twice", r.Address)
		}
		seen[r.Address] = true
	}
	if len(rs) != n {
		t.Fatalf("%d records, want %d", len(rs), n)
	}
	for i := range n {
		a := addrIn(s, 0, i+1)
		if !seen[a] {
			t.Fatalf("address %s not used: allocation is not dense", a)
		}
	}
}

func TestListSkipsForeignFilesAndReportsBrokenOnes(t *testing.T) {
	s := openStore(t)
	good, err := s.Create(spec("w-0"), t0)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		".tmp-sim-0000000000000000-123": "{",
		"README.json":                   "{}",
		"notes.txt":                     "hello",
	} {
		if err := os.WriteFile(filepath.Join(s.Dir(), name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.List()
	if err != nil || len(rs) != 1 || rs[0] != good {
		t.Fatalf("List = %+v, %v", rs, err)
	}

	broken := filepath.Join(s.Dir(), "sim-ffffffffffffffff.json")
	if err := os.WriteFile(broken, []byte(`{"id": "sim-ffffffffffffffff", "address": "10.0.0.1"`), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err = s.List()
	if len(rs) != 1 || err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("List with broken file = %d records, %v", len(rs), err)
	}
	// No allocation while an address might be hidden in an unreadable file.
	if _, err := s.Create(spec("w-1"), t0); err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("Create with broken file: %v", err)
	}

	// A file whose content names another machine is broken too.
	b, _ := os.ReadFile(s.Path(good.ID))
	if err := os.WriteFile(broken, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("sim-ffffffffffffffff"); err == nil || !strings.Contains(err.Error(), "holds id") {
		t.Fatalf("Get of mismatched file: %v", err)
	}
}

func TestGetRejectsPathsAsIDs(t *testing.T) {
	s := openStore(t)
	for _, id := range []string{"../x", "sim-../../etc", "", "sim-0123456789ABCDEF"} {
		if _, err := s.Get(id); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want an invalid-id error", id, err)
		}
		if err := s.Delete(id); err == nil {
			t.Errorf("Delete(%q) succeeded", id)
		}
	}
}

func TestOpenNeedsDirectory(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := Open(f); err == nil {
		t.Fatal("Open(file) succeeded")
	}
}

func TestOpenRecordsTheBlockOnce(t *testing.T) {
	s := openStore(t)
	if !s.Block().Valid() {
		t.Fatalf("block %d", s.Block())
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(), "sim.json"))
	if err != nil || !strings.Contains(string(b), `"block":`) {
		t.Fatalf("sim.json: %q, %v", b, err)
	}
	for range 5 {
		again, err := Open(s.Dir())
		if err != nil || again.Block() != s.Block() {
			t.Fatalf("reopen: block %d, %v; want %d", again.Block(), err, s.Block())
		}
	}
	os.WriteFile(filepath.Join(s.Dir(), "sim.json"), []byte(`{"block": 0}`), 0o600)
	if _, err := Open(s.Dir()); err == nil || !strings.Contains(err.Error(), "not in 1..254") {
		t.Fatalf("block 0 accepted: %v", err)
	}
}

func TestReblockOnlyWhenEmpty(t *testing.T) {
	s := openStore(t)
	old := s.Block()
	if err := s.Reblock(); err != nil {
		t.Fatal(err)
	}
	if s.Block() == old {
		t.Fatalf("Reblock kept %s", old)
	}
	if again, _ := Open(s.Dir()); again.Block() != s.Block() {
		t.Fatalf("new block not recorded: %s vs %s", again.Block(), s.Block())
	}
	r, err := s.Create(spec("w-0"), t0)
	if err != nil {
		t.Fatal(err)
	}
	if a := netip.MustParseAddr(r.Address); !s.Block().Contains(a) {
		t.Fatalf("address %s outside the block %s", a, s.Block())
	}
	if err := s.Reblock(); err == nil {
		t.Fatal("Reblock of a store with machines succeeded")
	}
}

func TestDiskHoldsUserDataAndGoesWithTheMachine(t *testing.T) {
	s := openStore(t)
	r, err := s.Create(spec("w-0"), t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.UserData(r.ID)
	if err != nil || string(got) != string(spec("").UserData) {
		t.Fatalf("UserData = %q, %v", got, err)
	}
	p := filepath.Join(s.DiskDir(r.ID), UserDataFile)
	for path, want := range map[string]os.FileMode{s.DiskDir(r.ID): 0o700, p: 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: mode %v, %v; want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if rs, err := s.List(); err != nil || len(rs) != 1 {
		t.Fatalf("the disk folder is listed as a machine: %d, %v", len(rs), err)
	}
	os.WriteFile(filepath.Join(s.DiskDir(r.ID), "state.json"), []byte("{}"), 0o600)
	if err := s.Delete(r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.DiskDir(r.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("disk left behind: %v", err)
	}
	if _, err := s.UserData("../x"); err == nil {
		t.Fatal("UserData of a path")
	}
}

func TestValidDiskID(t *testing.T) {
	for id, want := range map[string]bool{
		"sim-0123456789abcdef": true, "3f2a9c1e-1111-4a4a-8b8b-000000000001": true, "metal-127-5-0-1": true,
		"": false, ".": false, "..": false, "../x": false, "a/b": false, "-x": false, strings.Repeat("a", 129): false,
	} {
		if got := ValidDiskID(id); got != want {
			t.Errorf("ValidDiskID(%q) = %v, want %v", id, got, want)
		}
	}
}
