package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
)

func newWhoamiCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show whom the server takes you for: user, role, source and expiry",
		Long: `Whoami asks the server whom it takes the caller for, with the credential
the other commands would send (a stored login, or a token): the user or
token name, the role, how they came in (oidc, local or token) and when
the credential expires.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "", outJSON, outYAML); err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.Get(cmd.Context(), client.AuthWhoamiPath, &raw); err != nil {
				return apiError(err)
			}
			w := cmd.OutOrStdout()
			switch output {
			case outJSON:
				return usageError(printJSON(w, raw))
			case outYAML:
				return usageError(printYAML(w, raw))
			}
			var who client.Whoami
			if err := json.Unmarshal(raw, &who); err != nil {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("GET %s: decode answer: %v", client.AuthWhoamiPath, err)}
			}
			return usageError(printWhoami(w, who))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: one line per field)")
	return cmd
}

func printWhoami(w io.Writer, who client.Whoami) error {
	expires := "never"
	if !who.ExpiresAt.IsZero() {
		expires = who.ExpiresAt.UTC().Format(time.RFC3339)
	}
	tw := newTabWriter(w)
	fmt.Fprintf(tw, "User:\t%s\n", orNone(who.User))
	fmt.Fprintf(tw, "Role:\t%s\n", orNone(who.Role))
	fmt.Fprintf(tw, "Source:\t%s\n", orNone(who.Source))
	if who.Subject != "" {
		fmt.Fprintf(tw, "Subject:\t%s\n", who.Subject)
	}
	if who.Email != "" {
		fmt.Fprintf(tw, "Email:\t%s\n", who.Email)
	}
	fmt.Fprintf(tw, "Expires:\t%s\n", expires)
	return tw.Flush()
}
