package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/version"
)

// versionReport is what `version -o json` prints.
type versionReport struct {
	ClientVersion client.Version  `json:"clientVersion"`
	ServerVersion *client.Version `json:"serverVersion,omitempty"`
}

func newVersionCmd() *cobra.Command {
	var (
		output     string
		clientOnly bool
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's and the server's version",
		Long: `Version prints rezusctl's own version and the version the server reports.
When the server cannot be reached, it prints the client's version and an
error, and exits 1, as kubectl version does; --client skips the server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != outJSON {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use text or json", output)}
			}
			rep := versionReport{ClientVersion: client.Version{Version: version.Version}}
			var serverErr error
			if !clientOnly {
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				rep.ServerVersion, serverErr = c.ServerVersion(cmd.Context())
			}
			w := cmd.OutOrStdout()
			if output == outJSON {
				b, err := json.Marshal(rep)
				if err != nil {
					return usageError(err)
				}
				if err := printJSON(w, b); err != nil {
					return usageError(err)
				}
			} else {
				fmt.Fprintf(w, "Client Version: %s\n", rep.ClientVersion.Version)
				if rep.ServerVersion != nil {
					fmt.Fprintf(w, "Server Version: %s\n", rep.ServerVersion.Version)
				}
			}
			if serverErr != nil {
				return &exitError{code: exitFailed, msg: serverErr.Error()}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only; do not ask the server")
	return cmd
}
