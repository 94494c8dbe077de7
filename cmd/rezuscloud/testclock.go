package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// envTestClock names a file that holds a time in RFC 3339. With it set,
// the reconciler and the Talos plane take that time as the current one,
// moving on at the rate of the real clock from when the file's content was
// last read; writing another time into the file moves the clock there.
// It exists for tests of maintenance windows only: never set it in
// production. The queue's timers still count real time, so a run waiting
// for a window that the test clock reached is started on request
// (POST /api/v1/reconcile).
const envTestClock = "REZUSCLOUD_TEST_CLOCK_FILE"

// testClock returns the clock of envTestClock, or nil when it is not set.
func testClock(getenv func(string) string) (func() time.Time, error) {
	path := getenv(envTestClock)
	if path == "" {
		return nil, nil
	}
	c := &fileClock{path: path}
	if err := c.read(); err != nil {
		return nil, err
	}
	return c.Now, nil
}

// fileClock is the clock of envTestClock.
type fileClock struct {
	path string

	mu      sync.Mutex
	text    string
	at      time.Time // the file's time, when it was read
	realAt  time.Time // the real time it was read at
	checked time.Time // when the file was last looked at
}

// read reads the file and, when its time changed, starts from it.
func (c *fileClock) read() error {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return fmt.Errorf("%s: %w", envTestClock, err)
	}
	text := strings.TrimSpace(string(b))
	if text == c.text {
		return nil
	}
	at, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return fmt.Errorf("%s %s: %q is not an RFC 3339 time", envTestClock, c.path, text)
	}
	c.text, c.at, c.realAt = text, at, time.Now()
	return nil
}

// Now is the test clock's time. It looks at the file at most every 50 ms;
// a file that cannot be read keeps the time going from the last one read.
func (c *fileClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if real := time.Now(); real.Sub(c.checked) > 50*time.Millisecond {
		c.checked = real
		_ = c.read()
	}
	return c.at.Add(time.Since(c.realAt))
}
