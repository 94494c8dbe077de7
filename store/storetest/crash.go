package storetest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// The crash check runs the test binary again as a child that writes in a
// loop, kills it with SIGKILL in the middle of its writes, and reopens
// the store: every transaction the child committed is there whole, the
// one it was writing is not there at all, and revisions continue.
const (
	// crashDirEnv names the store's dir to the child; set, the crash
	// check runs as the child.
	crashDirEnv = "REZUSCLOUD_STORETEST_CRASH_DIR"
	// crashRounds is how many times the child is killed; each child
	// continues where the last one was killed.
	crashRounds = 3
	// crashCommits is how many commits of its own the parent waits for
	// before each kill.
	crashCommits = 15
	// crashChildLimit ends a child that nobody killed.
	crashChildLimit = time.Minute
	// crashLock is the lock the child takes and writes its state under.
	crashLock, crashToken = "crash-lock", "crash-child"
)

// crashPad fills the child's records, so that a commit spans pages.
var crashPad = strings.Repeat("p", 8<<10)

// crashRecord is one of the records the child writes in every
// transaction.
type crashRecord struct {
	I   int    `json:"i"`
	Pad string `json:"pad"`
}

func testCrash(t *testing.T, open Opener) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(t, open, dir)
		return
	}
	dir := t.TempDir()
	var latest uint64
	for round := range crashRounds {
		seen := runCrashChild(t, dir)
		s := open(t, dir, Options{})
		view(t, s, func(tx store.Tx) error {
			n := checkCrashRecords(t, tx)
			if n < seen {
				t.Errorf("crash %d: the records hold transaction %d, but the child had committed %d: a commit was lost", round, n, seen)
			}
			checkCrashLog(t, tx)
			if rv := tx.ResourceVersion(); rv <= latest {
				t.Errorf("crash %d: the latest revision %d, after %d before: revisions went back", round, rv, latest)
			}
			latest = tx.ResourceVersion()
			return nil
		})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s := reopen(t, open, dir, Options{})
	rec := record(s)
	update(t, s, func(tx store.Tx) error { _, err := putRecord(tx, "Crash", "after", 1); return err })
	if rvs := rec.revisions(); len(rvs) != 1 || rvs[0] <= latest {
		t.Errorf("the first change after the crashes has revision %v, want one above %d", rvs, latest)
	}
}

// runCrashChild runs the child on dir, kills it once it has committed
// crashCommits transactions, and returns the last one it reported.
func runCrashChild(t *testing.T, dir string) int {
	t.Helper()
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first, seen := 0, 0
	var start time.Time
	sc := bufio.NewScanner(out)
	for (first == 0 || seen-first+1 < crashCommits) && sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
			seen, _ = strconv.Atoi(n)
			if first == 0 {
				first, start = seen, time.Now()
			}
		}
	}
	// The child has begun its next transaction as it reported this one.
	// A pause of up to one transaction's time (not a wait for anything)
	// puts the kill at a random point of it rather than at its start.
	if per := time.Since(start) / time.Duration(max(seen-first, 1)); per > 0 {
		time.Sleep(rand.N(per))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if first == 0 || seen-first+1 < crashCommits {
		t.Fatalf("the child stopped after committing %d to %d (%v):\n%s", first, seen, err, stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("the child ended with %v, not by the kill:\n%s", err, stderr.String())
	}
	return seen
}

// crashChild is the child's side: it writes transaction after
// transaction into the store in dir, from the one after the last the
// store holds, and reports each commit on stdout, until it is killed.
func crashChild(t *testing.T, open Opener, dir string) {
	s := open(t, dir, Options{})
	next := 1
	update(t, s, func(tx store.Tx) error {
		var a crashRecord
		if err := getRecord(tx, "Crash", "a", &a); err == nil {
			next = a.I + 1
		}
		return store.LockState(tx, "crash", store.Lock{ID: crashLock, Token: crashToken, Created: SeedTime, Info: []byte(`{}`)})
	})
	deadline := time.Now().Add(crashChildLimit)
	for i := next; time.Now().Before(deadline); i++ {
		update(t, s, func(tx store.Tx) error { return crashStep(tx, i) })
		fmt.Printf("committed %d\n", i)
	}
	t.Fatal("the crash child was never killed")
}

// crashStep is transaction i of the child: the state crash is at serial
// i (written first, so that most of the transaction lies between it and
// the commit), records a, b and c and a machine all say i, and record
// even exists when i is even.
func crashStep(tx store.Tx, i int) error {
	_, err := store.WriteState(tx, "crash", store.StateWrite{
		Data: State(uint64(i), "lin-crash", 256<<10), Serial: uint64(i), Lineage: "lin-crash",
		Token: crashToken, LockID: crashLock, Time: SeedTime, Keep: 3,
	})
	if err != nil {
		return err
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := putRecord(tx, "Crash", k, crashRecord{I: i, Pad: crashPad}); err != nil {
			return err
		}
	}
	m := Machine("crash-m0", "crash", "w", schema.RoleWorker, "small", 1)
	m.Spec.Hostname = "n" + strconv.Itoa(i)
	if _, err := tx.PutObject(schema.KindMachine, "crash-m0", m); err != nil {
		return err
	}
	if i%2 == 0 {
		_, err = putRecord(tx, "Crash", "even", crashRecord{I: i})
	} else if _, err = tx.Delete("Crash", "even"); errors.Is(err, store.ErrNotFound) {
		err = nil
	}
	return err
}

// checkCrashRecords checks that the store holds one whole transaction of
// the child's and returns its number.
func checkCrashRecords(t *testing.T, tx store.Tx) int {
	t.Helper()
	var a crashRecord
	if err := getRecord(tx, "Crash", "a", &a); err != nil {
		t.Fatal(err)
	}
	n := a.I
	for _, k := range []string{"b", "c"} {
		var r crashRecord
		if err := getRecord(tx, "Crash", k, &r); err != nil || r.I != n || r.Pad != crashPad {
			t.Errorf("record %s holds transaction %d (%v), record a %d: a transaction is torn", k, r.I, err, n)
		}
	}
	var m schema.Machine
	if err := tx.GetObject(schema.KindMachine, "crash-m0", &m); err != nil || m.Spec.Hostname != "n"+strconv.Itoa(n) {
		t.Errorf("the machine holds %q (%v), want n%d: a transaction is torn", m.Spec.Hostname, err, n)
	}
	var even crashRecord
	err := getRecord(tx, "Crash", "even", &even)
	if n%2 == 0 && (err != nil || even.I != n) || n%2 == 1 && !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after transaction %d the record even is %+v, %v: a transaction is torn", n, even.I, err)
	}
	data, meta, err := tx.State("crash")
	if err != nil || meta.Serial == nil || *meta.Serial != uint64(n) || !bytes.Equal(data, State(uint64(n), "lin-crash", 256<<10)) {
		t.Errorf("the state after transaction %d: %v; want serial %d whole", n, err, n)
	}
	if l, err := tx.Lock("crash"); err != nil || l == nil || l.ID != crashLock || l.Token != crashToken {
		t.Errorf("the child's lock after the crash: %+v, %v", l, err)
	}
	return n
}

// checkCrashLog checks that the event log holds every change after its
// horizon once, with consecutive revisions up to the latest.
func checkCrashLog(t *testing.T, tx store.Tx) {
	t.Helper()
	from, latest := tx.EventsFrom(), tx.ResourceVersion()
	next := from + 1
	err := tx.Events(from, func(c store.Change) error {
		if c.Resource.ResourceVersion != next {
			return fmt.Errorf("the event log has revision %d where %d comes next", c.Resource.ResourceVersion, next)
		}
		next++
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if next-1 != latest {
		t.Errorf("the event log ends at %d, the store's latest revision is %d", next-1, latest)
	}
}
