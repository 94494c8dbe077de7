package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// State returns a plain TF state of serial and lineage, padded with
// filler bytes to at least size bytes.
func State(serial uint64, lineage string, size int) []byte {
	head := fmt.Sprintf(`{"version":4,"serial":%d,"lineage":%q,"resources":[],"filler":"`, serial, lineage)
	pad := max(size-len(head)-2, 0)
	return append(append([]byte(head), bytes.Repeat([]byte{'x'}, pad)...), '"', '}')
}

// write builds the StateWrite of a state of serial and lineage.
func write(token string, serial uint64, lineage string, size int) store.StateWrite {
	return store.StateWrite{Data: State(serial, lineage, size), Serial: serial, Lineage: lineage,
		Token: token, Time: SeedTime, Keep: 3}
}

func lockOf(id, token string) store.Lock {
	return store.Lock{ID: id, Token: token, Created: SeedTime, Info: json.RawMessage(`{"ID":"` + id + `","Who":"ana@host"}`)}
}

// wantLocked fails t unless err is a *LockedError whose holder is id of
// token.
func wantLocked(t testing.TB, what string, err error, id, token string) {
	t.Helper()
	var le *store.LockedError
	if !errors.As(err, &le) || le.Lock.ID != id || le.Lock.Token != token || !strings.Contains(string(le.Lock.Info), "ana@host") {
		t.Errorf("%s: %v, want a LockedError with the holder %s of %s and its LockInfo", what, err, id, token)
	}
}

// testLocks: a lock is taken once, a second taker learns the holder, a
// write needs the lock's ID from its token, an unlock naming another ID
// is refused, a force-unlock needs force, and ReleaseLock releases only
// the lock it names. Locks are listed with their holders and persist.
func testLocks(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	update(t, s, func(tx store.Tx) error {
		if err := store.LockState(tx, "alpha", lockOf("L1", "tofu-a")); err != nil {
			return err
		}
		if err := store.LockState(tx, "alpha", lockOf("L1", "tofu-a")); err != nil {
			t.Errorf("taking the held lock again: %v, want nil", err)
		}
		wantLocked(t, "a second lock", store.LockState(tx, "alpha", lockOf("L2", "tofu-b")), "L1", "tofu-a")
		_, err := store.WriteState(tx, "alpha", write("tofu-a", 1, "lin", 100))
		wantLocked(t, "a write without the lock ID", err, "L1", "tofu-a")
		w := write("tofu-b", 1, "lin", 100)
		w.LockID = "L1"
		_, err = store.WriteState(tx, "alpha", w)
		wantLocked(t, "a write of another token under the lock's ID", err, "L1", "tofu-a")
		w.Token = "tofu-a"
		if _, err := store.WriteState(tx, "alpha", w); err != nil {
			t.Errorf("a write under the lock: %v", err)
		}
		wantLocked(t, "a delete by another token", store.RemoveState(tx, "alpha", "tofu-b", ""), "L1", "tofu-a")
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, open, dir, Options{})
	update(t, s, func(tx store.Tx) error {
		locks, err := tx.Locks()
		if err != nil || len(locks) != 1 || locks[0].State != "alpha" || locks[0].ID != "L1" || locks[0].Token != "tofu-a" ||
			!locks[0].Created.Equal(SeedTime) {
			t.Errorf("Locks after a reopen: %+v, %v; want alpha's L1 of tofu-a", locks, err)
		}
		_, err = store.UnlockState(tx, "alpha", "L2", "tofu-a", false)
		wantLocked(t, "an unlock naming another lock", err, "L1", "tofu-a")
		var fe *store.ForceUnlockError
		if _, err := store.UnlockState(tx, "alpha", "", "tofu-a", false); !errors.As(err, &fe) || !fe.NoID {
			t.Errorf("an unlock without the ID: %v, want a ForceUnlockError", err)
		}
		if _, err := store.UnlockState(tx, "alpha", "L1", "tofu-b", false); !errors.As(err, &fe) || fe.NoID || fe.Lock.Token != "tofu-a" {
			t.Errorf("an unlock of another token's lock: %v, want a ForceUnlockError naming tofu-a", err)
		}
		if l, err := store.UnlockState(tx, "alpha", "", "admin", true); err != nil || l.ID != "L1" {
			t.Errorf("a force-unlock: %+v, %v; want L1 released", l, err)
		}
		if _, err := store.UnlockState(tx, "alpha", "L1", "tofu-a", false); !errors.Is(err, store.ErrNotLocked) {
			t.Errorf("an unlock of a released lock: %v, want ErrNotLocked", err)
		}
		w := write("tofu-a", 2, "lin", 100)
		w.LockID = "L1"
		var ge *store.GuardError
		if _, err := store.WriteState(tx, "alpha", w); !errors.As(err, &ge) || ge.Reason != store.LockReleased {
			t.Errorf("a write under a released lock: %v, want LockReleased", err)
		}

		if err := store.LockState(tx, "beta", lockOf("L3", "tofu-b")); err != nil {
			return err
		}
		if ok, err := store.ReleaseLock(tx, "beta", "L4", "tofu-b"); ok || err != nil {
			t.Errorf("ReleaseLock of another ID: %v, %v; want nothing released", ok, err)
		}
		if ok, err := store.ReleaseLock(tx, "beta", "L3", "tofu-b"); !ok || err != nil {
			t.Errorf("ReleaseLock: %v, %v; want released", ok, err)
		}
		if l, err := tx.Lock("beta"); l != nil || err != nil {
			t.Errorf("lock after ReleaseLock: %+v, %v; want none", l, err)
		}
		return nil
	})
}

// versions lists the kept version numbers of the state name and its
// current one.
func versions(t testing.TB, tx store.Tx, name string) (kept []uint64, current uint64) {
	t.Helper()
	vs, err := tx.StateVersions(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		kept = append(kept, v.Version)
		if v.Current {
			current = v.Version
		}
	}
	return kept, current
}

// testStateHistory: every write keeps the previous version, up to Keep;
// the guards refuse another lineage and a lower serial, compare with the
// newest version that has a lineage, let only an admin overwrite bytes of
// unknown lineage, and let anyone write after a delete.
func testStateHistory(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	update(t, s, func(tx store.Tx) error {
		for serial := range uint64(6) {
			if v, err := store.WriteState(tx, "alpha", write("tofu", serial, "lin-a", 200)); err != nil || v != serial+1 {
				t.Fatalf("write of serial %d: version %d, %v; want %d", serial, v, err, serial+1)
			}
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, open, dir, Options{})
	update(t, s, func(tx store.Tx) error {
		if kept, cur := versions(t, tx, "alpha"); fmt.Sprint(kept) != "[6 5 4 3]" || cur != 6 {
			t.Errorf("versions %v, current %d; want [6 5 4 3] (Keep 3) and 6", kept, cur)
		}
		data, meta, err := tx.State("alpha")
		if err != nil || !bytes.Equal(data, State(5, "lin-a", 200)) || *meta.Serial != 5 || meta.Lineage != "lin-a" || meta.Token != "tofu" || meta.Size != int64(len(data)) {
			t.Errorf("current state: %d bytes, %+v, %v; want serial 5 as written", len(data), meta, err)
		}
		if data, _, current, err := tx.StateVersion("alpha", 4); err != nil || current || !bytes.Equal(data, State(3, "lin-a", 200)) {
			t.Errorf("version 4: %d bytes, current %v, %v; want serial 3's bytes", len(data), current, err)
		}
		if _, _, _, err := tx.StateVersion("alpha", 2); !errors.Is(err, store.ErrNoState) {
			t.Errorf("version 2, beyond Keep: %v, want ErrNoState", err)
		}
		var ge *store.GuardError
		if _, err := store.WriteState(tx, "alpha", write("tofu", 6, "lin-b", 200)); !errors.As(err, &ge) || ge.Reason != store.OtherLineage || ge.Stored.Lineage != "lin-a" {
			t.Errorf("a write of another lineage: %v, want OtherLineage against lin-a", err)
		}
		if _, err := store.WriteState(tx, "alpha", write("tofu", 4, "lin-a", 200)); !errors.As(err, &ge) || ge.Reason != store.StaleSerial || *ge.Stored.Serial != 5 {
			t.Errorf("a write of a lower serial: %v, want StaleSerial against 5", err)
		}
		if _, err := store.WriteState(tx, "alpha", write("tofu", 5, "lin-a", 200)); err != nil {
			t.Errorf("a write of the same serial: %v", err)
		}

		// Bytes an older server stored unchecked: the guards look past
		// them to the newest version that has a lineage.
		if _, err := tx.PutState("alpha", []byte("not a state"), store.StateMeta{Size: 11, Token: "old-server"}, 3); err != nil {
			return err
		}
		if _, err := store.WriteState(tx, "alpha", write("tofu", 1, "lin-a", 200)); !errors.As(err, &ge) || ge.Reason != store.StaleSerial {
			t.Errorf("a stale write over unchecked bytes: %v, want StaleSerial", err)
		}
		for range 3 {
			if _, err := tx.PutState("alpha", []byte("not a state"), store.StateMeta{Size: 11, Token: "old-server"}, 3); err != nil {
				return err
			}
		}
		if _, err := store.WriteState(tx, "alpha", write("tofu", 9, "lin-z", 200)); !errors.As(err, &ge) || ge.Reason != store.UnknownLineage {
			t.Errorf("a write over bytes of unknown lineage: %v, want UnknownLineage", err)
		}
		admin := write("admin", 9, "lin-z", 200)
		admin.Admin = true
		if _, err := store.WriteState(tx, "alpha", admin); err != nil {
			t.Errorf("an admin's write over bytes of unknown lineage: %v", err)
		}

		if err := store.RemoveState(tx, "alpha", "tofu", ""); err != nil {
			return err
		}
		if _, _, err := tx.State("alpha"); !errors.Is(err, store.ErrNoState) || store.CurrentState(tx, "alpha") != nil {
			t.Errorf("state after a delete: %v, want ErrNoState", err)
		}
		if err := tx.DeleteState("alpha"); !errors.Is(err, store.ErrNoState) {
			t.Errorf("a second delete: %v, want ErrNoState", err)
		}
		if _, err := store.WriteState(tx, "alpha", write("tofu", 0, "lin-new", 200)); err != nil {
			t.Errorf("a new lineage after a delete: %v", err)
		}
		if kept, cur := versions(t, tx, "alpha"); len(kept) != 4 || cur != kept[0] {
			t.Errorf("versions after the delete and a write %v, current %d", kept, cur)
		}
		if vs, err := tx.StateVersions("never"); err != nil || len(vs) != 0 {
			t.Errorf("versions of a state never stored: %v, %v", vs, err)
		}
		return nil
	})
}

// testLargeValues: a state of 64 MiB and resources of several MiB
// round-trip, also across a reopen, beside small ones.
func testLargeValues(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	big := State(7, "lin-big", 64<<20)
	record := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	record = append(append([]byte(`{"blob":"`), record...), '"', '}')
	patch := Patch("alpha", "big", 1)
	patch.Spec.Patch = strings.Repeat("# a long comment line of a big patch\n", 3<<20/37)
	update(t, s, func(tx store.Tx) error {
		w := write("tofu", 7, "lin-big", 0)
		w.Data = big
		if _, err := store.WriteState(tx, "big", w); err != nil {
			return err
		}
		if _, err := tx.Put("Blob", "big", record); err != nil {
			return err
		}
		if _, err := tx.Put("Blob", "small", []byte(`{}`)); err != nil {
			return err
		}
		_, err := tx.PutObject(schema.KindConfigPatch, "alpha/big", patch)
		return err
	})
	check := func(when string) {
		t.Helper()
		view(t, s, func(tx store.Tx) error {
			data, meta, err := tx.State("big")
			if err != nil || !bytes.Equal(data, big) || meta.Size != int64(len(big)) {
				t.Errorf("%s: state of %d bytes read back as %d bytes, %v", when, len(big), len(data), err)
			}
			if r, err := tx.Get("Blob", "big"); err != nil || !bytes.Equal(r.Object, record) {
				t.Errorf("%s: record of %d bytes read back as %d bytes, %v", when, len(record), len(r.Object), err)
			}
			var got schema.ConfigPatch
			if err := tx.GetObject(schema.KindConfigPatch, "alpha/big", &got); err != nil || got.Spec.Patch != patch.Spec.Patch {
				t.Errorf("%s: patch of %d bytes read back as %d bytes, %v", when, len(patch.Spec.Patch), len(got.Spec.Patch), err)
			}
			return nil
		})
	}
	check("written")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, open, dir, Options{})
	check("after a reopen")
}
