package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/version"
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
	root.AddCommand(newServeCmd(getenv, runServe), newTokenCmd(), newUserCmd(), newStoreCmd(getenv), newDemoCmd(getenv), newSimCmd(getenv), &cobra.Command{
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
