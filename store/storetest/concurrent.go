package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rezuscloud/rezuscloud/store"
)

// Accounts of the concurrency check: each transfer moves units between
// two of them in one transaction, so their sum never changes.
const (
	accounts       = 8
	accountStart   = 100
	accountKind    = "Account"
	transferKind   = "Transfers"
	accountsTotal  = accounts * accountStart
	transferWriter = "w%d"
)

// balances reads every account and the writers' transfer counts.
func balances(tx store.Tx, writers int) (sum int, counts []int, err error) {
	for i := range accounts {
		var n int
		if err := getRecord(tx, accountKind, name("a", i), &n); err != nil {
			return 0, nil, err
		}
		sum += n
	}
	for w := range writers {
		var n int
		if err := getRecord(tx, transferKind, fmt.Sprintf(transferWriter, w), &n); err != nil {
			return 0, nil, err
		}
		counts = append(counts, n)
	}
	return sum, counts, nil
}

// testConcurrentWriters: writers in goroutines transfer between accounts,
// each transaction reading and writing several records, while readers
// check in their own transactions that the sum holds; at the end every
// transfer is counted and the sum is unchanged, and the commit hooks saw
// strictly increasing revisions.
func testConcurrentWriters(t *testing.T, open Opener) {
	s := reopen(t, open, t.TempDir(), Options{})
	const writers, transfers = 4, 30
	update(t, s, func(tx store.Tx) error {
		for i := range accounts {
			if _, err := putRecord(tx, accountKind, name("a", i), accountStart); err != nil {
				return err
			}
		}
		for w := range writers {
			if _, err := putRecord(tx, transferKind, fmt.Sprintf(transferWriter, w), 0); err != nil {
				return err
			}
		}
		return nil
	})
	rec := record(s)
	// Readers read after commits, while the other writers are busy.
	more := make(chan struct{}, 1)
	s.OnCommit(func([]store.Change) {
		select {
		case more <- struct{}{}:
		default:
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range transfers {
				if err := s.Update(func(tx store.Tx) error { return transfer(tx, w, i) }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	stop := make(chan struct{})
	var reads atomic.Int64
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-more:
				case <-stop:
					return
				}
				err := s.View(func(tx store.Tx) error {
					sum, _, err := balances(tx, writers)
					if err == nil && sum != accountsTotal {
						err = fmt.Errorf("a reader saw the accounts sum to %d, want %d: a transaction was half done or lost", sum, accountsTotal)
					}
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	view(t, s, func(tx store.Tx) error {
		sum, counts, err := balances(tx, writers)
		if err != nil {
			return err
		}
		if sum != accountsTotal {
			t.Errorf("accounts sum to %d after the transfers, want %d", sum, accountsTotal)
		}
		for w, n := range counts {
			if n != transfers {
				t.Errorf("writer %d counted %d transfers, want %d", w, n, transfers)
			}
		}
		return nil
	})
	if reads.Load() == 0 {
		t.Error("no reader finished a read while the writers ran")
	}
	if got := len(rec.commits); got != writers*transfers {
		t.Errorf("%d commits reached the hooks, want %d", got, writers*transfers)
	}
	strictlyIncreasing(t, "concurrent commits", rec.revisions())
}

// transfer moves i%7+1 units from one account to another and counts the
// transfer of writer w.
func transfer(tx store.Tx, w, i int) error {
	from, to := name("a", (w+i)%accounts), name("a", (w+3*i+1)%accounts)
	if from == to {
		to = name("a", (w+i+1)%accounts)
	}
	var a, b, n int
	if err := getRecord(tx, accountKind, from, &a); err != nil {
		return err
	}
	if err := getRecord(tx, accountKind, to, &b); err != nil {
		return err
	}
	amount := i%7 + 1
	if _, err := putRecord(tx, accountKind, from, a-amount); err != nil {
		return err
	}
	if _, err := putRecord(tx, accountKind, to, b+amount); err != nil {
		return err
	}
	counter := fmt.Sprintf(transferWriter, w)
	if err := getRecord(tx, transferKind, counter, &n); err != nil {
		return err
	}
	_, err := putRecord(tx, transferKind, counter, n+1)
	return err
}
