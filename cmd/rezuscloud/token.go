package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage access tokens",
	}
	var role string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a token and print it with its tokens-file line",
		Long: `Create a fresh random token for NAME and print it, once, together with the
line to add to the tokens file. The file keeps only the token's SHA-256, so the
token cannot be shown again; create a new one if it is lost.

Roles are ordered: view reads state; edit also writes and locks it; admin also
reads state history and force-unlocks locks held by other tokens.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := backend.ParseRole(role)
			if err != nil {
				return err
			}
			token, line, err := backend.NewToken(args[0], r)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(),
				"# token %q (role %s), shown only this once:\n%s\n# add this line to the tokens file:\n%s\n",
				args[0], r, token, line)
			return err
		},
	}
	create.Flags().StringVar(&role, "role", "view", "role of the token: view, edit or admin")
	cmd.AddCommand(create)
	return cmd
}
