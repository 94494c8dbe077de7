package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/supervise"
	"github.com/rezuscloud/rezuscloud/internal/version"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
)

// newRootCmd builds the command tree. getenv supplies REZUSCLOUD_*
// settings, so tests can pass their own environment.
func newRootCmd(getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:           "rezuscloud",
		Short:         "GitOps reconciler for Talos Kubernetes clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(getenv, runServe), newTokenCmd(), newUserCmd(), newStoreCmd(getenv), newDemoCmd(getenv), newSimCmd(getenv), newGuardCmd(), newSuperviseCmd(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Version)
			return err
		},
	})
	return root
}

// newGuardCmd is the guard that a replica runs each tofu apply under
// (see tofu.Guard); the server runs it, people do not.
func newGuardCmd() *cobra.Command {
	return &cobra.Command{
		Use:                tofu.GuardCommand + " --until UNIX-NANOSECONDS -- TOFU ARGS...",
		Short:              "Run tofu for a replica, and interrupt it once the replica's lease has ended unrenewed",
		Hidden:             true,
		DisableFlagParsing: true,
		Run: func(_ *cobra.Command, args []string) {
			os.Exit(tofu.Guard(args, os.Stderr))
		},
	}
}

// newSuperviseCmd runs the server under a first process that waits for
// what the server leaves running (see package supervise): a container's
// entrypoint.
func newSuperviseCmd() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "supervise [--wait D] -- COMMAND ARGS...",
		Short: "Run the server as a container's first process, so that a tofu apply it leaves at a crash can save its state",
		Long: `supervise runs COMMAND (rezuscloud serve and its flags), passes it SIGTERM,
SIGINT and SIGHUP, and once it has exited waits up to --wait for the
processes it left running, such as a tofu apply that outlives a crash or an
OOM kill to save its state, before it exits with COMMAND's exit code. A
container ends every process in it when its first process exits; under the
supervisor such an apply is not cut short. Linux only.`,
		Args: cobra.MinimumNArgs(1),
		Run: func(cmd *cobra.Command, args []string) {
			if cmd.ArgsLenAtDash() != 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "rezuscloud supervise: put -- before the command: supervise [--wait D] -- COMMAND ARGS...")
				os.Exit(2)
			}
			os.Exit(supervise.Run(args, wait, cmd.ErrOrStderr()))
		},
	}
	cmd.Flags().SetInterspersed(false) // COMMAND's flags are its own
	cmd.Flags().DurationVar(&wait, "wait", supervise.DefaultWait, "how long to wait, after COMMAND exited, for the processes it left running")
	return cmd
}
