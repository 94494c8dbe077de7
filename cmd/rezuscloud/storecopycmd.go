package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// newStoreCopyCmd builds `store copy`; getenv supplies the etcd settings
// that the command line leaves unset.
func newStoreCopyCmd(getenv func(string) string) *cobra.Command {
	var (
		from, to string
		etcd     etcdFlags
	)
	efs := pflag.NewFlagSet("etcd", pflag.ContinueOnError)
	addEtcdFlags(efs, &etcd)
	cmd := &cobra.Command{
		Use:   "copy --from bbolt:DIR --to etcd:URLS[?prefix=PREFIX]",
		Short: "Copy a stopped server's store into etcd, for several servers",
		Long: `Copy everything the store of a stopped server holds into an empty store in
etcd, where several servers share it (serve --store etcd): the tenants, node
groups, machines and commits the API serves, the records of the reconciler and
its Talos plane, every TF state with each kept version (under the same version
numbers) and its meta, the locks held on states, and package history's series.

--from bbolt:DIR names the data dir of the server (or its rezuscloud.db),
which must be stopped. --to etcd:URLS names the etcd members, comma-separated,
and the key prefix of the store (default --etcd-prefix); TLS comes from
--etcd-ca-file, --etcd-cert-file and --etcd-key-file, or their REZUSCLOUD_
variables, as for serve. --to bbolt:DIR copies into a new data dir instead.

The target must be empty. Every object keeps its uid, createdAt and updatedAt;
objects take new resourceVersions, in the same order as before, so watches and
lists start again after the move. TF states are copied as they are stored:
encrypted when the server runs with REZUSCLOUD_STATE_PASSPHRASE, which the
servers on etcd need too. A copy that breaks off says so; empty the target
(etcdctl del --prefix PREFIX) before copying again.`,
		Example: `  rezuscloud store copy --from bbolt:/var/lib/rezuscloud --to 'etcd:https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379?prefix=/rezuscloud/' \
    --etcd-ca-file ca.crt --etcd-cert-file client.crt --etcd-key-file client.key`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			return applyConfig(efs, getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStoreCopy(cmd.Context(), from, to, &etcd, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&from, "from", "", "the store to copy: bbolt:`DIR`, the data dir of a stopped server")
	fs.StringVar(&to, "to", "", "the empty store to copy into: etcd:`URLS`[?prefix=PREFIX], or bbolt:DIR")
	fs.AddFlagSet(efs)
	documentEnv(efs)
	return cmd
}

// runStoreCopy copies the store from names into the store to names, and
// says what it copied on out.
func runStoreCopy(ctx context.Context, from, to string, etcd *etcdFlags, out io.Writer) error {
	srcDir, ok := strings.CutPrefix(from, engineBolt+":")
	if !ok || srcDir == "" {
		return fmt.Errorf("--from %q: want bbolt:DIR, the data dir of a stopped server", from)
	}
	srcDir, err := boltDataDir(srcDir)
	if err != nil {
		return err
	}
	src, err := bolt.Open(srcDir, &bolt.Options{OpenTimeout: storeLockWait})
	if errors.Is(err, bolt.ErrLocked) {
		return fmt.Errorf("a server runs on %s: stop it first, so that nothing changes while the store is copied", srcDir)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	clock := new(store.CopyClock)
	dst, closeDst, err := openCopyTarget(ctx, to, srcDir, etcd, clock)
	if err != nil {
		return err
	}
	n, err := store.Copy(src, dst, clock)
	if cerr := closeDst(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	_, err = fmt.Fprintf(out, "copied %s to %s: %s\n", from, to, n)
	return err
}

// boltDataDir returns the data dir that path names (the dir, or its
// store file), which must hold a store.
func boltDataDir(path string) (string, error) {
	if filepath.Base(path) == bolt.DBFile {
		path = filepath.Dir(path)
	}
	if _, err := os.Stat(filepath.Join(path, bolt.DBFile)); err != nil {
		return "", fmt.Errorf("%s holds no store (%s): %w", path, bolt.DBFile, err)
	}
	return filepath.Abs(path)
}

// openCopyTarget opens the store that to names, with clock as its clock,
// and returns it with what closes it.
func openCopyTarget(ctx context.Context, to, srcDir string, etcd *etcdFlags, clock *store.CopyClock) (store.Store, func() error, error) {
	engine, where, _ := strings.Cut(to, ":")
	switch {
	case engine == engineEtcd && where != "":
		endpoints, query, _ := strings.Cut(where, "?")
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, nil, fmt.Errorf("--to %q: %w", to, err)
		}
		etcd.endpoints = strings.Split(endpoints, ",")
		if p := q.Get("prefix"); p != "" {
			etcd.prefix = p
		}
		st, cli, err := openEtcdStore(ctx, etcd, etcdstore.Config{Now: clock.Now, CompactInterval: -1}, true)
		if err != nil {
			return nil, nil, err
		}
		return st, func() error { err := st.Close(); cli.Close(); return err }, nil
	case engine == engineBolt && where != "":
		dir, err := filepath.Abs(where)
		if err != nil {
			return nil, nil, err
		}
		if dir == srcDir {
			return nil, nil, fmt.Errorf("--to %q is the store --from names", to)
		}
		st, err := bolt.Open(dir, &bolt.Options{OpenTimeout: storeLockWait, Now: clock.Now})
		if errors.Is(err, bolt.ErrLocked) {
			return nil, nil, fmt.Errorf("a server runs on %s: copy into a data dir no server uses", dir)
		}
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	return nil, nil, fmt.Errorf("--to %q: want etcd:URLS[?prefix=PREFIX] or bbolt:DIR", to)
}
