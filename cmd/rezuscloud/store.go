package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/version"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// envToken is the API token of `store backup --server`, as rezusctl reads
// it.
const envToken = "REZUSCLOUD_TOKEN"

// storeLockWait is how long `store backup --data` waits for the store's
// lock: a server holds it as long as it runs.
const storeLockWait = time.Second

// newStoreCmd builds `store backup`, `store restore` and `store copy`; getenv supplies
// the token.
func newStoreCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Back up the server's store, restore it into a data dir, or copy it into etcd",
		Long: `The store (rezuscloud.db in the data dir) holds what the server knows beside
git: every tenant's TF state with its kept versions and locks, the commits it
reconciled, the records of its Talos plane and the objects the API serves.
Together with the git repository and the state passphrase, a copy of it is
what a new server needs to go on where the old one left off.`,
	}
	cmd.AddCommand(newStoreBackupCmd(getenv), newStoreRestoreCmd(), newStoreCopyCmd(getenv))
	return cmd
}

// storeBackupFlags are the settings of `store backup`.
type storeBackupFlags struct {
	server, data, tokenFile string
}

func newStoreBackupCmd(getenv func(string) string) *cobra.Command {
	var f storeBackupFlags
	cmd := &cobra.Command{
		Use:   "backup FILE (--server URL | --data DIR)",
		Short: "Write a consistent copy of the server's store to FILE",
		Long: `Write a consistent copy of the server's store, as of one commit, to FILE
(mode 0600, replaced atomically; a copy that breaks off leaves FILE as it was).
TF states are copied as the store keeps them: encrypted when the server runs
with REZUSCLOUD_STATE_PASSPHRASE, and never decrypted.

With --server URL the running server makes the copy while it goes on working.
It needs an admin token, from ` + envToken + ` or --token-file, and the
server writes the download to its audit log. With --data DIR the copy is read
from the data dir of a server that is not running; while one runs there, use
--server.

The copy is checked before FILE is written: it must open as a whole, consistent
store. Restore it with 'rezuscloud store restore FILE --data DIR'.`,
		Example: `  REZUSCLOUD_TOKEN=$(cat admin.token) rezuscloud store backup rezuscloud-$(date +%F).db --server https://rezuscloud.example.com
  rezuscloud store backup copy.db --data /var/lib/rezuscloud`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStoreBackup(cmd.Context(), f, getenv, args[0], cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.server, "server", "", "base `URL` of the running server that makes the copy")
	fs.StringVar(&f.data, "data", "", "data `DIR` of a server that is not running, to copy its store from")
	fs.StringVar(&f.tokenFile, "token-file", "", "`FILE` whose first line is an admin token of --server; default: "+envToken)
	return cmd
}

// runStoreBackup writes the copy that f asks for into file, checks it and
// says what it holds on out.
func runStoreBackup(ctx context.Context, f storeBackupFlags, getenv func(string) string, file string, out io.Writer) error {
	if (f.server == "") == (f.data == "") {
		return errors.New("give --server URL to copy the store of a running server, or --data DIR when no server runs there")
	}
	if f.tokenFile != "" && f.server == "" {
		return errors.New("--token-file goes with --server")
	}
	copyTo, from := storeFromDir(f.data), f.data
	if f.server != "" {
		c, err := storeClient(f, getenv)
		if err != nil {
			return err
		}
		copyTo, from = func(w io.Writer) error { _, err := c.StoreBackup(ctx, w); return err }, c.Server()
	}
	w, err := atomicfile.Create(file, 0o600)
	if err != nil {
		return err
	}
	defer w.Abort()
	if err := copyTo(w); err != nil {
		return err
	}
	info, err := bolt.CheckFile(w.Name())
	if err != nil {
		return fmt.Errorf("the copy of %s is not a whole store, %s is left as it was: %w", from, file, err)
	}
	if err := w.Commit(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "wrote %s: the store of %s, %s\n", file, from, describeStore(info))
	return err
}

// storeFromDir copies the store of the data dir dir, where no server may
// run.
func storeFromDir(dir string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := bolt.BackupDir(dir, w, storeLockWait)
		if errors.Is(err, bolt.ErrLocked) {
			return fmt.Errorf("a server runs on %s; use --server URL", dir)
		}
		return err
	}
}

// storeClient is the client of --server, with the token of --token-file
// or of the environment.
func storeClient(f storeBackupFlags, getenv func(string) string) (*client.Client, error) {
	token := strings.TrimSpace(getenv(envToken))
	if f.tokenFile != "" {
		var err error
		if token, err = client.ReadTokenFile(f.tokenFile); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
	}
	return client.New(client.Options{Server: f.server, Token: token, UserAgent: "rezuscloud/" + version.Version})
}

func newStoreRestoreCmd() *cobra.Command {
	var (
		data  string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "restore FILE --data DIR",
		Short: "Put a copy of a store in place as the store of a data dir",
		Long: `Put FILE, a copy that 'rezuscloud store backup' wrote, in place as the store
of the data dir DIR (made 0700 if new; the store gets mode 0600, replaced
atomically). FILE must open as a whole, consistent store of a format this
version reads. No server may run on DIR: stop it first. A store that DIR
already holds is replaced only with --force.

Then start the server with --data DIR, the same repository and the same
REZUSCLOUD_STATE_PASSPHRASE (the TF states in the copy are encrypted with it):
it goes on where the server the copy was taken from left off, and runs no tofu
for the commit that server had applied.`,
		Example: `  rezuscloud store restore rezuscloud-2026-12-05.db --data /var/lib/rezuscloud`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return errors.New("give --data DIR, the data dir to restore the store into")
			}
			info, err := bolt.Restore(data, args[0], force)
			switch {
			case errors.Is(err, bolt.ErrLocked):
				return fmt.Errorf("a server runs on %s: stop the server first", data)
			case errors.Is(err, bolt.ErrExists):
				return fmt.Errorf("%s already holds a store; give --force to replace it with %s", data, args[0])
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: %s\n", args[0], data, describeStore(info))
			return err
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "data `DIR` of the server to restore the store into")
	cmd.Flags().BoolVar(&force, "force", false, "replace the store that DIR already holds")
	return cmd
}

// describeStore says what a store file holds, in a few words.
func describeStore(info bolt.FileInfo) string {
	return fmt.Sprintf("revision %d, %s, %s, %d bytes", info.Revision, plural(info.Tenants, "tenant"), plural(info.States, "TF state"), info.Size)
}
