package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/version"
)

// Exit codes shared by every command.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and found something: invalid manifests, differences, a resource that does not exist
	exitUsage  = 2 // bad flags or arguments, unreadable input, unreachable server, a refused token
)

// exitError carries an exit code through cobra. Its message, when not empty,
// is printed as one line on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

const rootLong = `rezusctl is the command line of RezusCloud. It validates manifests before
they are pushed, and reads what the server applied: tenants, node groups,
config patches, machines, provider modules and the outcome of every commit.
The server's API is read-only: to change anything, change the manifests in
git.

Connection settings come from flags, then the environment
(REZUSCLOUD_SERVER, REZUSCLOUD_TOKEN, REZUSCLOUD_TOKEN_FILE,
REZUSCLOUD_CONTEXT, REZUSCLOUD_CONFIG), then the current context of the
config file ($XDG_CONFIG_HOME/rezuscloud/config.yaml, by default
~/.config/rezuscloud/config.yaml; see 'rezusctl config'), and default to
http://127.0.0.1:8080 without a token. Prefer a token file to --token, which
other users of the machine can see in the process list. 'rezusctl login'
signs in to a server with single sign-on or as a local user and stores the
login for the commands that follow; 'rezusctl whoami' shows whom the server
takes you for.

Exit codes: 0 success; 1 the command found something (invalid manifests,
differences, a resource that does not exist); 2 usage errors, unreadable
input, an unreachable server, or a token the server refused.

Shell completion: 'rezusctl completion bash|zsh|fish|powershell' prints a
script that completes commands, flags, resource types and resource names;
'rezusctl completion bash --help' says how to install it.`

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "rezusctl",
		Short:         "Operate RezusCloud: validate manifests and inspect what the server applied",
		Long:          rootLong,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: err.Error()}
	})
	pf := root.PersistentFlags()
	pf.String("config", "", "config `FILE` of contexts (default $XDG_CONFIG_HOME/rezuscloud/config.yaml; env "+envConfig+")")
	pf.String("context", "", "the config file's context to use (env "+envContext+")")
	pf.StringP("server", "s", "", "server `URL`, e.g. https://rezuscloud.example.com (env "+envServer+"; default "+client.DefaultServer+")")
	pf.String("token", "", "bearer `TOKEN` (env "+envToken+"); prefer --token-file, since argv is visible to others")
	pf.String("token-file", "", "`FILE` whose first line is the bearer token (env "+envTokenFile+")")
	pf.Duration("request-timeout", 30*time.Second, "bound on each request that is not a watch; 0 for none")
	pf.BoolP("verbose", "v", false, "print each request (method, URL, status, duration) on stderr; never the token")

	root.AddCommand(
		newValidateCmd(),
		newGetCmd(),
		newDescribeCmd(),
		newWatchCmd(),
		newStatusCmd(),
		newDownloadCmd("kubeconfig", "an admin kubeconfig of the tenant's Kubernetes cluster", client.KubeconfigPath),
		newDownloadCmd("talosconfig", "a talosconfig for the tenant's Talos control plane", client.TalosconfigPath),
		newVersionCmd(),
		newConfigCmd(),
	)

	// Further commands, one AddCommand line each, such as diff (diff.go),
	// go below this line.
	root.AddCommand(newDiffCmd())
	root.AddCommand(newLogsCmd())
	root.AddCommand(newReconcileCmd())
	root.AddCommand(newBackupCmd())
	root.AddCommand(newNotifyCmd())
	root.AddCommand(newLoginCmd(), newLogoutCmd(), newWhoamiCmd())

	return root
}

// run executes the command line and returns the process exit code.
// SIGINT and SIGTERM end the command's context: a watch then stops and
// exits 0.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

// exitCode prints the error of a command on stderr and returns the exit
// code it deserves.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "error: %s\n", ee.msg)
		}
		return ee.code
	}
	// Unknown commands and argument count errors come from cobra itself.
	fmt.Fprintf(stderr, "error: %s\n", err)
	return exitUsage
}

// apiError turns an error of the client into the exit code it deserves: 1
// for a resource that does not exist (as kubectl does), 2 for everything
// else (no answer, a refused token, a bad request, a server error).
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if client.Code(err) == http.StatusNotFound {
		return &exitError{code: exitFailed, msg: notFoundMessage(err)}
	}
	return &exitError{code: exitUsage, msg: err.Error()}
}

// notFoundMessage is the server's 404 message without the hint it gives
// API users ("; GET /api/v1/tenants lists the tenants"), which rezusctl
// users would read as a command.
func notFoundMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "; GET /"); i > 0 {
		msg = msg[:i]
	}
	return msg
}
