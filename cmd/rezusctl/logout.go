package main

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
)

func newLogoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the stored login of the server and forget it",
		Long: `Logout ends the login that 'rezusctl login' stored for the server (--server,
or the context's): it asks the server to end it, and for single sign-on
asks the provider to revoke the refresh token when the provider offers
that. Then it removes the login from the config file, also when the
server or the provider cannot be reached, which it reports as a warning.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, false)
			if err != nil {
				return usageError(err)
			}
			warnTightened(cmd, path, cfg)
			conn, _, err := resolveServer(cmd, path, cfg)
			if err != nil {
				return usageError(err)
			}
			l := cfg.login(conn.Server)
			if l == nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("no login of %s is stored in %s", serverKey(conn.Server), path)}
			}
			login := *l
			conn.Token, conn.Login = login.Token, nil
			c, err := clientOf(cmd, conn)
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			if err := c.Logout(cmd.Context()); err != nil && !nothingToEnd(login, err) {
				fmt.Fprintf(stderr, "warning: the server did not end the login: %v\n", err)
			}
			if login.Source == client.LoginOIDC && login.RefreshToken != "" {
				if err := client.Revoke(cmd.Context(), nil, login); err != nil {
					fmt.Fprintf(stderr, "warning: the refresh token was not revoked: %v\n", err)
				}
			}
			cfg.forgetLogin(conn.Server)
			if err := saveConfig(path, cfg); err != nil {
				return usageError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged out of %s (%s).\n", c.Server(), orNone(login.User))
			return nil
		},
	}
}

// nothingToEnd reports whether the server's refusal of a logout means
// that it holds nothing of the login: a login that has expired (401), or
// an ID token, which the server keeps no record of (400).
func nothingToEnd(l client.Login, err error) bool {
	switch client.Code(err) {
	case http.StatusUnauthorized:
		return true
	case http.StatusBadRequest:
		return l.Source == client.LoginOIDC
	}
	return false
}
