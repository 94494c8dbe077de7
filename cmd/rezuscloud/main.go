// Command rezuscloud is the RezusCloud server: it serves the Terraform HTTP
// state backend and the read-only API, and manages access tokens. See
// `rezuscloud serve --help`.
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	cmd := newRootCmd(os.Getenv)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "rezuscloud:", err)
		os.Exit(1)
	}
}
