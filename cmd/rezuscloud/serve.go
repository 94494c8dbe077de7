package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/version"
)

// serveFlags are the settings of `rezuscloud serve`. Each is a flag, an
// environment variable and a config file key; applyConfig layers them.
type serveFlags struct {
	config          string
	data            string
	listen          string
	tokensFile      string
	stateMaxBytes   int64
	stateHistory    int
	staleLockAge    time.Duration
	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string
}

// newServeCmd builds `serve`; run does the serving once the settings are
// parsed (runServe; tests pass their own).
func newServeCmd(getenv func(string) string, run func(context.Context, *serveFlags, io.Writer) error) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the state backend and the API",
		Long: `Serve the Terraform HTTP state backend (/tfstate/{name}), its versions
listing (/api/v1/tfstate/{name}/versions), /healthz, /readyz and /version.

Every setting is a flag, an environment variable (REZUSCLOUD_ and the flag name
in upper case with '_' for '-', as shown below) and a key of the YAML file
given by --config (keys are flag names). A flag beats the environment, which
beats the file, which beats the default.

Clients authenticate with tokens from the tokens file (see
'rezuscloud token create'), sent as HTTP basic auth (user = token name,
password = token) or as 'Authorization: Bearer TOKEN'. Without a tokens file
every request is allowed as an admin; the server then listens on loopback
only and refuses any other address.

SIGTERM or SIGINT shuts the server down gracefully: requests in flight finish
and the store is closed. SIGHUP reloads the tokens file.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd.Flags(), getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), &f, cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&f.config, configFlag, "", "YAML `FILE` with further settings; keys are flag names")
	fs.StringVar(&f.data, "data", "data", "data `DIR` (mode 0700) that holds the store")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "TCP `ADDR` to serve on")
	fs.StringVar(&f.tokensFile, "tokens-file", "", "tokens `FILE`, one 'NAME ROLE SHA256-HEX' line per token; without it only loopback is served and everyone is admin")
	fs.Int64Var(&f.stateMaxBytes, "state-max-bytes", backend.DefaultMaxStateBytes, "largest TF state a POST may send, in bytes")
	fs.IntVar(&f.stateHistory, "state-history", backend.DefaultStateHistory, "earlier versions kept per TF state; 0 keeps none")
	fs.DurationVar(&f.staleLockAge, "stale-lock-age", backend.DefaultStaleLockAge, "age after which a state lock is reported as stale (never broken); 0 never")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a shutdown waits for requests in flight")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	documentEnv(fs)
	return cmd
}

// serverConfig turns the settings into a backend.Config.
func serverConfig(f *serveFlags, log *slog.Logger) (backend.Config, error) {
	if f.data == "" {
		return backend.Config{}, fmt.Errorf("no data directory: give --data or %s", envName("data"))
	}
	history := f.stateHistory
	switch {
	case history < 0:
		return backend.Config{}, fmt.Errorf("--state-history %d: want 0 or more", history)
	case history == 0:
		history = -1
	}
	if f.stateMaxBytes <= 0 {
		return backend.Config{}, fmt.Errorf("--state-max-bytes %d: want a positive size", f.stateMaxBytes)
	}
	stale := f.staleLockAge
	switch {
	case stale < 0:
		return backend.Config{}, fmt.Errorf("--stale-lock-age %v: want 0 or more", stale)
	case stale == 0:
		stale = -1
	}
	return backend.Config{
		DataDir:         f.data,
		Listen:          f.listen,
		TokensFile:      f.tokensFile,
		MaxStateBytes:   f.stateMaxBytes,
		StateHistory:    history,
		StaleLockAge:    stale,
		ShutdownTimeout: f.shutdownTimeout,
		Version:         version.Version,
		Logger:          log,
	}, nil
}

func newLogger(f *serveFlags, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

func runServe(ctx context.Context, f *serveFlags, stderr io.Writer) error {
	log, err := newLogger(f, stderr)
	if err != nil {
		return err
	}
	cfg, err := serverConfig(f, log)
	if err != nil {
		return err
	}
	srv, err := backend.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := srv.Tokens().Reload(); err != nil {
					log.Error("reload tokens file; keeping the tokens in use", "err", err)
				} else {
					log.Info("tokens file reloaded", "tokens", srv.Tokens().Len())
				}
			}
		}
	}()
	return srv.Run(ctx)
}
