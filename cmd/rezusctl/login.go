package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
	"golang.org/x/term"

	"github.com/rezuscloud/rezuscloud/internal/client"
)

const loginLong = `Login signs in to the server (--server, or the context's) and stores the
login in the config file, mode 0600, for the commands that follow.

Without --username it signs in with the server's single sign-on: it asks
the server for its OpenID Connect provider, and then signs in with the
device authorization grant when the provider offers it (open the address
it prints, on any device, and enter the code), or else in a browser on
this machine, which comes back to a port on 127.0.0.1 ($BROWSER opens
the address; without it, open the printed one). The server must accept
the ID token (a person whose groups give no role is refused, and nothing
is stored). It is sent as the bearer, and renewed with the refresh token
when it has less than a minute left.

With --username it logs in as a local user of the server. It asks for the
password without echoing it, or reads its first line from standard input
when that is not a terminal. The server's login token lasts a short time;
log in again when it has expired.

A token given by --token, --token-file or the environment is used instead
of a stored login. 'rezusctl logout' forgets the login.`

func newLoginCmd() *cobra.Command {
	var username string
	var browser bool
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in to the server with single sign-on, or as a local user with --username",
		Long:  loginLong,
		Example: `  rezusctl login --server https://rezuscloud.example.com
  rezusctl login --username alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, explicit := configPath(cmd)
			if path == "" {
				return &exitError{code: exitUsage, msg: "no config file to store the login in: set HOME or XDG_CONFIG_HOME, or give --config"}
			}
			cfg, err := loadConfig(path, explicit, true)
			if err != nil {
				return usageError(err)
			}
			warnTightened(cmd, path, cfg)
			conn, _, err := resolveServer(cmd, path, cfg)
			if err != nil {
				return usageError(err)
			}
			c, err := clientOf(cmd, conn)
			if err != nil {
				return err
			}
			var l client.Login
			var role string
			if username != "" {
				l, role, err = loginLocal(cmd, c, username)
			} else if l, err = loginSSO(cmd, c, browser); err == nil {
				role, err = serverRole(cmd, conn, l)
			}
			if err != nil {
				return apiError(err)
			}
			if err := saveLogin(path, c.Server(), l); err != nil {
				return usageError(err)
			}
			as := l.Source
			if role != "" {
				as += ", role " + role
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s as %s (%s), until %s.\n", c.Server(), orNone(l.User), as, l.Expiry.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVarP(&username, "username", "u", "", "log in as this local `USER` of the server, with a password")
	cmd.Flags().BoolVar(&browser, "browser", false, "sign in with a browser on this machine even when the provider offers the device flow")
	return cmd
}

// loginLocal logs in as a local user with a password, and returns the
// login and the user's role.
func loginLocal(cmd *cobra.Command, c *client.Client, user string) (client.Login, string, error) {
	password, err := readPassword(cmd, user)
	if err != nil {
		return client.Login{}, "", err
	}
	a, err := c.LocalLogin(cmd.Context(), user, password)
	var se *client.StatusError
	if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusNotFound) {
		return client.Login{}, "", &exitError{code: exitUsage, msg: "login refused: " + se.Message}
	}
	if err != nil {
		return client.Login{}, "", err
	}
	name := a.User
	if name == "" {
		name = user
	}
	return client.Login{Source: client.LoginLocal, User: name, Token: a.Token, Expiry: a.ExpiresAt}, a.Role, nil
}

// serverRole asks the server whom it takes a new single sign-on login for
// and returns the role. A login the server refuses, such as that of a
// person in no group with a role, is an error, and is not stored; a
// server without whoami gives no role.
func serverRole(cmd *cobra.Command, conn *connection, l client.Login) (string, error) {
	check := *conn
	check.Token, check.Login = l.Token, nil
	c, err := clientOf(cmd, &check)
	if err != nil {
		return "", err
	}
	who, err := c.Whoami(cmd.Context())
	var se *client.StatusError
	switch {
	case err == nil:
		return who.Role, nil
	case client.IsNotFound(err):
		return "", nil
	case client.IsAuth(err) && errors.As(err, &se):
		return "", &exitError{code: exitUsage, msg: fmt.Sprintf("%s signed in at the provider, but the server refuses the login: %s", orNone(l.User), se.Message)}
	}
	return "", err
}

// readPassword asks for the password on the terminal without echo, or
// reads the first line of standard input when it is not a terminal.
func readPassword(cmd *cobra.Command, user string) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return readTerminalPassword(cmd, int(f.Fd()), user)
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", &exitError{code: exitUsage, msg: fmt.Sprintf("read the password from standard input: %v", err)}
	}
	return nonEmptyPassword(strings.TrimRight(line, "\r\n"))
}

// readTerminalPassword reads a password from the terminal fd without
// echo. An interrupt (Ctrl-C) ends the wait and turns echo back on.
func readTerminalPassword(cmd *cobra.Command, fd int, user string) (string, error) {
	stderr := cmd.ErrOrStderr()
	state, err := term.GetState(fd)
	if err != nil {
		return "", &exitError{code: exitUsage, msg: fmt.Sprintf("read the password: %v", err)}
	}
	fmt.Fprintf(stderr, "Password of %s: ", user)
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := term.ReadPassword(fd)
		got <- read{b, err}
	}()
	select {
	case <-cmd.Context().Done():
		term.Restore(fd, state)
		fmt.Fprintln(stderr)
		return "", &exitError{code: exitUsage, msg: "interrupted"}
	case r := <-got:
		fmt.Fprintln(stderr)
		if r.err != nil {
			return "", &exitError{code: exitUsage, msg: fmt.Sprintf("read the password: %v", r.err)}
		}
		return nonEmptyPassword(string(r.b))
	}
}

func nonEmptyPassword(p string) (string, error) {
	if p == "" {
		return "", &exitError{code: exitUsage, msg: "the password is empty"}
	}
	return p, nil
}

// loginSSO signs in with the server's OpenID Connect provider.
func loginSSO(cmd *cobra.Command, c *client.Client, browser bool) (client.Login, error) {
	ctx := cmd.Context()
	ac, err := c.AuthConfig(ctx)
	if errors.Is(err, client.ErrNoSSO) {
		return client.Login{}, &exitError{code: exitUsage, msg: err.Error() + "; log in as a local user with --username NAME, or use a token"}
	}
	if err != nil {
		return client.Login{}, err
	}
	p, err := client.Discover(ctx, nil, ac.Issuer)
	if err != nil {
		return client.Login{}, &exitError{code: exitUsage, msg: err.Error()}
	}
	conf := &oauth2.Config{
		ClientID: ac.CLIClientID,
		Endpoint: oauth2.Endpoint{
			AuthURL:       p.AuthorizationEndpoint,
			TokenURL:      p.TokenEndpoint,
			DeviceAuthURL: p.DeviceAuthorizationEndpoint,
			AuthStyle:     oauth2.AuthStyleInParams,
		},
		Scopes: loginScopes(ac.Scopes, p),
	}
	stderr := cmd.ErrOrStderr()
	var tok *oauth2.Token
	var nonce string
	switch {
	case p.DeviceAuthorizationEndpoint != "" && !browser:
		tok, err = deviceLogin(ctx, stderr, conf)
	case p.AuthorizationEndpoint == "":
		return client.Login{}, &exitError{code: exitUsage, msg: "the provider " + ac.Issuer + " offers neither the device flow nor an authorization endpoint"}
	default:
		tok, nonce, err = browserLogin(ctx, stderr, conf)
	}
	if err != nil {
		return client.Login{}, err
	}
	l, err := client.LoginFromToken(tok, client.Login{Issuer: ac.Issuer, ClientID: ac.CLIClientID, TokenURL: p.TokenEndpoint, Scopes: conf.Scopes})
	if err != nil {
		return client.Login{}, &exitError{code: exitUsage, msg: err.Error()}
	}
	claims, _ := client.ParseIDToken(l.Token)
	switch {
	case claims.Issuer != ac.Issuer:
		return client.Login{}, &exitError{code: exitUsage, msg: fmt.Sprintf("the ID token was issued by %q, not by the server's provider %q", claims.Issuer, ac.Issuer)}
	case nonce != "" && claims.Nonce != nonce:
		return client.Login{}, &exitError{code: exitUsage, msg: "the ID token's nonce is not this login's"}
	case l.RefreshToken == "":
		fmt.Fprintf(stderr, "warning: the provider gave no refresh token; log in again when the ID token expires at %s\n", l.Expiry.Format(time.RFC3339))
	}
	return l, nil
}

// loginScopes are the scopes a login asks for: the server's, with openid,
// and offline_access for a refresh token when the provider offers it.
func loginScopes(server []string, p *client.Provider) []string {
	scopes := slices.Clone(server)
	for _, s := range []string{"openid", "offline_access"} {
		if !slices.Contains(scopes, s) && (s == "openid" || p.Supports(s)) {
			scopes = append(scopes, s)
		}
	}
	return scopes
}

// deviceLogin signs in with the device authorization grant (RFC 8628):
// the person opens the verification address and enters the code, while
// this polls the provider.
func deviceLogin(ctx context.Context, stderr io.Writer, conf *oauth2.Config) (*oauth2.Token, error) {
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: "start the device login: " + client.ProviderError(err).Error()}
	}
	fmt.Fprintf(stderr, "To sign in, open %s and enter the code %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(stderr, "or open %s\n", da.VerificationURIComplete)
	}
	fmt.Fprintln(stderr, "Waiting for the sign-in...")
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &exitError{code: exitUsage, msg: "the login was interrupted before the sign-in"}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("the code %s expired before anyone signed in with it", da.UserCode)}
		}
		return nil, &exitError{code: exitUsage, msg: "the device login failed: " + client.ProviderError(err).Error()}
	}
	return tok, nil
}
