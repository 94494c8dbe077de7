package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/version"
)

// Environment variables rezusctl reads. Flags beat them; they beat the
// config file.
const (
	envConfig    = "REZUSCLOUD_CONFIG"
	envContext   = "REZUSCLOUD_CONTEXT"
	envServer    = "REZUSCLOUD_SERVER"
	envToken     = "REZUSCLOUD_TOKEN"
	envTokenFile = "REZUSCLOUD_TOKEN_FILE"
	// envAllowLoopbackMetal is the server's setting of the same name.
	envAllowLoopbackMetal = "REZUSCLOUD_ALLOW_LOOPBACK_METAL"
)

// cliConfig is the config file: named contexts of a server URL and a token
// file, the one in use, and the logins of `rezusctl login`, one per
// server.
//
//	current-context: prod
//	contexts:
//	  - name: prod
//	    server: https://rezuscloud.example.com
//	    token-file: ~/.config/rezuscloud/prod.token
//	logins:
//	  - server: https://rezuscloud.example.com
//	    source: oidc
//	    user: alice@example.com
//	    token: eyJ...
//	    refresh-token: ...
type cliConfig struct {
	CurrentContext string       `json:"current-context,omitempty"`
	Contexts       []cliContext `json:"contexts,omitempty"`
	Logins         []savedLogin `json:"logins,omitempty"`

	// tightened is the mode the file had when loadConfig found it
	// readable by others with logins in it, and made it 0600.
	tightened fs.FileMode
}

// savedLogin is the login of one server.
type savedLogin struct {
	Server string `json:"server"`
	client.Login
}

// serverKey is the form of a server URL that logins are found by: no
// trailing slash, scheme and host in lower case.
func serverKey(server string) string {
	server = strings.TrimSuffix(server, "/")
	if scheme, rest, ok := strings.Cut(server, "://"); ok {
		host, path, _ := strings.Cut(rest, "/")
		server = strings.ToLower(scheme) + "://" + strings.ToLower(host)
		if path != "" {
			server += "/" + path
		}
	}
	return server
}

// login returns the login of server, or nil.
func (c *cliConfig) login(server string) *client.Login {
	key := serverKey(server)
	for i := range c.Logins {
		if serverKey(c.Logins[i].Server) == key {
			return &c.Logins[i].Login
		}
	}
	return nil
}

// setLogin stores l as the login of server, replacing any other.
func (c *cliConfig) setLogin(server string, l client.Login) {
	if have := c.login(server); have != nil {
		*have = l
		return
	}
	c.Logins = append(c.Logins, savedLogin{Server: serverKey(server), Login: l})
}

// forgetLogin removes the login of server and reports whether there was
// one.
func (c *cliConfig) forgetLogin(server string) bool {
	key := serverKey(server)
	for i := range c.Logins {
		if serverKey(c.Logins[i].Server) == key {
			c.Logins = append(c.Logins[:i], c.Logins[i+1:]...)
			return true
		}
	}
	return false
}

// cliContext is one named server. TokenFile may start with "~/"; a
// relative path is relative to the config file's directory.
type cliContext struct {
	Name      string `json:"name"`
	Server    string `json:"server,omitempty"`
	TokenFile string `json:"token-file,omitempty"`
}

func (c *cliConfig) context(name string) *cliContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// defaultConfigPath returns $XDG_CONFIG_HOME/rezuscloud/config.yaml, or
// ~/.config/rezuscloud/config.yaml.
func defaultConfigPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "rezuscloud", "config.yaml")
}

// configPath returns the config file to use and whether it was named
// explicitly (--config or REZUSCLOUD_CONFIG), in which case it must exist
// for reading.
func configPath(cmd *cobra.Command) (string, bool) {
	if p := flagString(cmd, "config"); p != "" {
		return expandHome(p), true
	}
	if p := os.Getenv(envConfig); p != "" {
		return expandHome(p), true
	}
	return defaultConfigPath(), false
}

// loadConfig reads the config file. A default file that does not exist is
// an empty config; one named explicitly must exist unless mayBeMissing.
func loadConfig(path string, explicit, mayBeMissing bool) (*cliConfig, error) {
	cfg := &cliConfig{}
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && (!explicit || mayBeMissing) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	if err := cfg.tighten(path); err != nil {
		return nil, err
	}
	for i, l := range cfg.Logins {
		if l.Server == "" || l.Token == "" {
			return nil, fmt.Errorf("config file %s: logins[%d] has no server or no token", path, i)
		}
	}
	seen := map[string]bool{}
	for i, c := range cfg.Contexts {
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("config file %s: contexts[%d] has no name", path, i)
		case seen[c.Name]:
			return nil, fmt.Errorf("config file %s: context %q is defined twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return cfg, nil
}

// saveConfig writes the config file (mode 0600, its directory 0700),
// replacing it atomically.
func saveConfig(path string, cfg *cliConfig) error {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	return atomicfile.Write(path, b, 0o600)
}

// tighten makes a config file that holds logins readable by its owner
// only, as saveConfig writes it, when it is not already.
func (c *cliConfig) tighten(path string) error {
	if len(c.Logins) == 0 {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("config file %s holds logins and is readable by others (mode %04o), and chmod failed: %w", path, mode, err)
		}
		c.tightened = mode
	}
	return nil
}

// warnTightened tells the user when loadConfig had to tighten the
// config file's mode.
func warnTightened(cmd *cobra.Command, path string, cfg *cliConfig) {
	if cfg.tightened != 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s holds logins and was readable by others (mode %04o); it is now 0600\n", path, cfg.tightened)
	}
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// connection is where and as whom rezusctl connects, and where each
// setting came from, for `config view` and error messages.
type connection struct {
	Server     string
	ServerFrom string
	Token      string
	TokenFrom  string
	// Login is the server's stored login, when the token comes from one.
	Login        *client.Login
	Context      string
	ConfigFile   string
	RequestLimit time.Duration
}

func flagString(cmd *cobra.Command, name string) string {
	f := lookupFlag(cmd, name)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

func flagChanged(cmd *cobra.Command, name string) bool {
	f := lookupFlag(cmd, name)
	return f != nil && f.Changed
}

func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	return cmd.Root().PersistentFlags().Lookup(name)
}

// resolveServer finds the server the command talks to and the context
// in use: flag > environment > config context > default.
func resolveServer(cmd *cobra.Command, path string, cfg *cliConfig) (*connection, *cliContext, error) {
	conn := &connection{ConfigFile: path}
	ctxName, ctxFrom := flagString(cmd, "context"), "--context"
	if ctxName == "" {
		ctxName, ctxFrom = os.Getenv(envContext), envContext
	}
	if ctxName == "" {
		ctxName, ctxFrom = cfg.CurrentContext, "current-context"
	}
	var cctx *cliContext
	if ctxName != "" {
		if cctx = cfg.context(ctxName); cctx == nil {
			return nil, nil, fmt.Errorf("context %q (from %s) is not in the config file %s", ctxName, ctxFrom, path)
		}
		conn.Context = ctxName
	}
	switch {
	case flagString(cmd, "server") != "":
		conn.Server, conn.ServerFrom = flagString(cmd, "server"), "--server"
	case os.Getenv(envServer) != "":
		conn.Server, conn.ServerFrom = os.Getenv(envServer), envServer
	case cctx != nil && cctx.Server != "":
		conn.Server, conn.ServerFrom = cctx.Server, "context "+cctx.Name
	default:
		conn.Server, conn.ServerFrom = client.DefaultServer, "default"
	}
	if d, err := cmd.Root().PersistentFlags().GetDuration("request-timeout"); err == nil {
		conn.RequestLimit = d
	}
	return conn, cctx, nil
}

// resolveConnection layers the settings: flag > environment > config
// context > default.
func resolveConnection(cmd *cobra.Command) (*connection, error) {
	path, explicit := configPath(cmd)
	cfg, err := loadConfig(path, explicit, false)
	if err != nil {
		return nil, err
	}
	warnTightened(cmd, path, cfg)
	conn, cctx, err := resolveServer(cmd, path, cfg)
	if err != nil {
		return nil, err
	}

	if flagChanged(cmd, "token") && flagChanged(cmd, "token-file") {
		return nil, &exitError{code: exitUsage, msg: "give --token or --token-file, not both"}
	}
	switch {
	case flagChanged(cmd, "token"):
		conn.Token, conn.TokenFrom = flagString(cmd, "token"), "--token"
		if conn.Token == "" {
			return nil, &exitError{code: exitUsage, msg: "--token is empty"}
		}
	case flagString(cmd, "token-file") != "":
		conn.TokenFrom = "--token-file " + flagString(cmd, "token-file")
		if conn.Token, err = client.ReadTokenFile(expandHome(flagString(cmd, "token-file"))); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
	case os.Getenv(envToken) != "":
		conn.Token, conn.TokenFrom = strings.TrimSpace(os.Getenv(envToken)), envToken
	case os.Getenv(envTokenFile) != "":
		conn.TokenFrom = envTokenFile
		if conn.Token, err = client.ReadTokenFile(expandHome(os.Getenv(envTokenFile))); err != nil {
			return nil, fmt.Errorf("%s: %w", envTokenFile, err)
		}
	case cfg.login(conn.Server) != nil:
		conn.Login = cfg.login(conn.Server)
		conn.TokenFrom = "the " + conn.Login.Source + " login of " + orNone(conn.Login.User) + " in " + path
	case cctx != nil && cctx.TokenFile != "":
		tf := tokenFilePath(path, cctx.TokenFile)
		conn.TokenFrom = "context " + cctx.Name + " (" + tf + ")"
		if conn.Token, err = client.ReadTokenFile(tf); err != nil {
			return nil, fmt.Errorf("token file of context %q: %w", cctx.Name, err)
		}
	}
	return conn, nil
}

// tokenFilePath resolves a context's token file: "~/" is the home
// directory; a relative path is relative to the config file.
func tokenFilePath(configFile, p string) string {
	p = expandHome(p)
	if !filepath.IsAbs(p) && configFile != "" {
		p = filepath.Join(filepath.Dir(configFile), p)
	}
	return p
}

// newClient returns a client of the server the command's connection
// settings name (flags, environment, config file). Commands that talk to
// the server call it; its errors are ready to return from RunE.
func newClient(cmd *cobra.Command) (*client.Client, error) {
	conn, err := resolveConnection(cmd)
	if err != nil {
		return nil, usageError(err)
	}
	return clientOf(cmd, conn)
}

// clientOf returns a client of conn's server with conn's credential.
func clientOf(cmd *cobra.Command, conn *connection) (*client.Client, error) {
	opts := client.Options{
		Server:    conn.Server,
		Token:     conn.Token,
		Timeout:   conn.RequestLimit,
		UserAgent: "rezusctl/" + version.Version,
	}
	if conn.Login != nil {
		opts.Credential = client.NewRefreshing(*conn.Login, func(l client.Login) error {
			return saveLogin(conn.ConfigFile, conn.Server, l)
		}, nil).WithLoad(func() (client.Login, bool) {
			cfg, err := loadConfig(conn.ConfigFile, false, true)
			if err != nil || cfg.login(conn.Server) == nil {
				return client.Login{}, false
			}
			return *cfg.login(conn.Server), true
		}).WithLock(client.FileLock(conn.ConfigFile + ".lock"))
	}
	if v, _ := cmd.Root().PersistentFlags().GetBool("verbose"); v {
		stderr := cmd.ErrOrStderr()
		opts.Trace = func(method, url string, status int, d time.Duration) {
			answer := "no answer"
			if status != 0 {
				answer = fmt.Sprint(status)
			}
			fmt.Fprintf(stderr, "%s %s -> %s in %s\n", method, url, answer, d.Round(time.Millisecond))
		}
	}
	c, err := client.New(opts)
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%v (from %s)", err, conn.ServerFrom)}
	}
	return c, nil
}

// saveLogin stores l as the login of server in the config file at path,
// as it is on disk now.
func saveLogin(path, server string, l client.Login) error {
	cfg, err := loadConfig(path, false, true)
	if err != nil {
		return err
	}
	cfg.setLogin(server, l)
	return saveConfig(path, cfg)
}

// usageError marks err as exit code 2 unless it already carries a code.
func usageError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitUsage, msg: err.Error()}
}
