package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

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
	root.AddCommand(newServeCmd(getenv, runServe), newTokenCmd(), newUserCmd(), newStoreCmd(getenv), newDemoCmd(getenv), newSimCmd(getenv), newGuardCmd(), &cobra.Command{
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
