package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage access tokens",
	}
	var role, expires, owner string
	create := &cobra.Command{
		Use:   "create NAME [ROLE]",
		Short: "Create a token and print it with its tokens-file line",
		Long: `Create a fresh random token for NAME and print it, once, together with the
line to add to the tokens file. The file keeps only the token's SHA-256, so the
token cannot be shown again; create a new one if it is lost.

Roles are ordered: view reads state; edit also writes and locks it; admin also
reads state history and force-unlocks locks held by other tokens. The role is
the second argument or --role (default view).

--expires makes the token stop working after a duration from now (720h) or
at a time (2027-01-01T00:00:00Z); the line then ends in expires=RFC3339.
--owner names the person or team the token is for (owner=NAME), which
'rezusctl get tokens' shows.`,
		Example: `  rezuscloud token create ci edit --expires 720h --owner platform-team
  rezuscloud token create dashboard-reader --role view`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if cmd.Flags().Changed("role") && role != args[1] {
					return fmt.Errorf("role given twice: %q as an argument and %q with --role", args[1], role)
				}
				role = args[1]
			}
			r, err := backend.ParseRole(role)
			if err != nil {
				return err
			}
			opts := backend.TokenOptions{Owner: owner}
			if expires != "" {
				if opts.Expires, err = parseExpiry(expires, time.Now()); err != nil {
					return err
				}
			}
			token, line, err := backend.NewTokenFor(args[0], r, opts)
			if err != nil {
				return err
			}
			until := ""
			if !opts.Expires.IsZero() {
				until = ", expires " + opts.Expires.UTC().Format(time.RFC3339)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(),
				"# token %q (role %s%s), shown only this once:\n%s\n# add this line to the tokens file:\n%s\n",
				args[0], r, until, token, line)
			return err
		},
	}
	create.Flags().StringVar(&role, "role", "view", "role of the token: view, edit or admin")
	create.Flags().StringVar(&expires, "expires", "", "when the token stops working: a duration from now (720h) or an RFC 3339 time (2027-01-01T00:00:00Z); default never")
	create.Flags().StringVar(&owner, "owner", "", "the person or team the token is for")
	cmd.AddCommand(create)
	return cmd
}

// parseExpiry reads --expires: a positive duration from now, or an RFC
// 3339 time after now.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--expires %s: want a positive duration", s)
		}
		return now.Add(d).Truncate(time.Second), nil
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--expires %q: want a duration such as 720h or an RFC 3339 time such as 2027-01-01T00:00:00Z", s)
	}
	if !at.After(now) {
		return time.Time{}, fmt.Errorf("--expires %s is not in the future", s)
	}
	return at, nil
}
