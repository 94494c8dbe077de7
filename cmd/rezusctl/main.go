// Command rezusctl is the operator's command line for RezusCloud: it validates
// manifests locally and, in later commands, reads what the server has applied.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
