//go:build !linux

package supervise

import (
	"fmt"
	"io"
	"time"
)

// DefaultWait is how long the supervisor waits, after the server exited,
// for what the server left running.
const DefaultWait = 5 * time.Minute

// Run refuses to run: the supervisor needs Linux's child subreaper.
func Run(argv []string, wait time.Duration, stderr io.Writer) int {
	fmt.Fprintln(stderr, "rezuscloud supervise: runs on Linux only; run the server itself")
	return 2
}
