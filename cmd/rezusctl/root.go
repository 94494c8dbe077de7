package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/version"
)

// Exit codes shared by every command.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and found something: invalid manifests, differences
	exitUsage  = 2 // bad flags or arguments, unreadable input, unreachable server
)

// exitError carries an exit code through cobra. Its message, when not empty,
// is printed as one line on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "rezusctl",
		Short:         "Operate RezusCloud: validate manifests and inspect what the server applied",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: err.Error()}
	})
	root.AddCommand(newValidateCmd())
	return root
}

// run executes the command line and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "error: %s\n", ee.msg)
		}
		return ee.code
	}
	// Unknown commands and argument count errors come from cobra itself.
	fmt.Fprintf(stderr, "error: %s\n", err)
	return exitUsage
}
