package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change the contexts of the config file",
		Long: `The config file ($XDG_CONFIG_HOME/rezuscloud/config.yaml, by default
~/.config/rezuscloud/config.yaml; or --config, or REZUSCLOUD_CONFIG) names
servers as contexts, each with the file that holds its token:

  current-context: prod
  contexts:
    - name: prod
      server: https://rezuscloud.example.com
      token-file: ~/.config/rezuscloud/prod.token

A relative token-file is relative to the config file's directory.

'rezusctl login' stores its login of each server under logins: the ID
token and refresh token of single sign-on, or a local user's login token.
So the file is written with mode 0600, and one that holds logins and is
readable by others is made 0600 when it is read. A login is used for its
server unless a token is given by flag or environment.`,
	}
	cmd.AddCommand(newConfigViewCmd(), newConfigUseContextCmd(), newConfigSetContextCmd(), newConfigGetContextsCmd(), newConfigCurrentContextCmd())
	return cmd
}

func newConfigViewCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "view",
		Short: "Print the config file and the connection settings in effect",
		Long: `View prints the config file, then the server and the source of the token
that the other commands would use, after flags and the environment. It
never prints the token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, false)
			if err != nil {
				return usageError(err)
			}
			warnTightened(cmd, path, cfg)
			conn, err := resolveConnection(cmd)
			if err != nil {
				return usageError(err)
			}
			b, err := yaml.Marshal(hideSecrets(cfg))
			if err != nil {
				return usageError(err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "# %s\n%s", path, b)
			fmt.Fprintf(w, "# in effect:\n# server: %s (from %s)\n", conn.Server, conn.ServerFrom)
			token := "none"
			if conn.Token != "" || conn.Login != nil {
				token = "from " + conn.TokenFrom
			}
			_, err = fmt.Fprintf(w, "# token: %s\n", token)
			return usageError(err)
		},
	}
}

// hideSecrets returns cfg with its logins' tokens replaced by "(hidden)".
func hideSecrets(cfg *cliConfig) *cliConfig {
	out := *cfg
	out.Logins = make([]savedLogin, len(cfg.Logins))
	for i, l := range cfg.Logins {
		l.Token = "(hidden)"
		if l.RefreshToken != "" {
			l.RefreshToken = "(hidden)"
		}
		out.Logins[i] = l
	}
	return &out
}

func newConfigUseContextCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the current context",
		Args:  exactArgs(1, "rezusctl config use-context NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, false)
			if err != nil {
				return usageError(err)
			}
			if cfg.context(args[0]) == nil {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("no context %q in %s; add it with rezusctl config set-context", args[0], path)}
			}
			cfg.CurrentContext = args[0]
			if err := saveConfig(path, cfg); err != nil {
				return usageError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Switched to context %q.\n", args[0])
			return nil
		},
	}
}

func newConfigSetContextCmd() *cobra.Command {
	var server, tokenFile string
	var use bool
	cmd := &cobra.Command{
		Use:   "set-context NAME",
		Short: "Add a context, or change its server or token file",
		Long: `Set-context adds the context NAME to the config file, creating the file if
needed, or changes the settings given of an existing one. --use also makes
it the current context. Here --server and --token-file are the context's
settings; nothing connects to a server.`,
		Example: `  rezusctl config set-context prod --server https://rezuscloud.example.com --token-file ~/.config/rezuscloud/prod.token --use`,
		Args:    exactArgs(1, "rezusctl config set-context NAME [--server URL] [--token-file FILE]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, true)
			if err != nil {
				return usageError(err)
			}
			c := cfg.context(args[0])
			if c == nil {
				cfg.Contexts = append(cfg.Contexts, cliContext{Name: args[0]})
				c = &cfg.Contexts[len(cfg.Contexts)-1]
			}
			if cmd.Flags().Changed("server") {
				c.Server = server
			}
			if cmd.Flags().Changed("token-file") {
				c.TokenFile = tokenFile
			}
			if use || cfg.CurrentContext == "" {
				cfg.CurrentContext = args[0]
			}
			if err := saveConfig(path, cfg); err != nil {
				return usageError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Context %q set in %s.\n", args[0], path)
			return nil
		},
	}
	// These shadow the root's connection flags of the same names.
	cmd.Flags().StringVar(&server, "server", "", "the context's server `URL`")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "the context's token `FILE`")
	cmd.Flags().BoolVar(&use, "use", false, "also make it the current context")
	return cmd
}

func newConfigGetContextsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, false)
			if err != nil {
				return usageError(err)
			}
			return usageError(printContexts(cmd.OutOrStdout(), cfg))
		},
	}
}

func printContexts(w io.Writer, cfg *cliConfig) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tTOKEN-FILE")
	for _, c := range cfg.Contexts {
		cur := ""
		if c.Name == cfg.CurrentContext {
			cur = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cur, c.Name, orNone(c.Server), orNone(c.TokenFile))
	}
	return tw.Flush()
}

func newConfigCurrentContextCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, explicit := configPath(cmd)
			cfg, err := loadConfig(path, explicit, false)
			if err != nil {
				return usageError(err)
			}
			if cfg.CurrentContext == "" {
				return &exitError{code: exitFailed, msg: "no current context is set in " + path}
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.CurrentContext)
			return nil
		},
	}
}

// exactArgs requires n arguments and shows usage in its error.
func exactArgs(n int, usage string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return &exitError{code: exitUsage, msg: fmt.Sprintf("want %d argument(s), got %d: %s", n, len(args), usage)}
		}
		return nil
	}
}
