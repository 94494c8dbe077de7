package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/client"
)

// newDownloadCmd builds `kubeconfig` or `talosconfig`: an admin-only file
// of a tenant, written to stdout or to a file only its owner may read.
func newDownloadCmd(name, what string, path func(tenant string) string) *cobra.Command {
	var (
		file  string
		force bool
	)
	cmd := &cobra.Command{
		Use:   name + " TENANT",
		Short: "Download " + what,
		Long: "Download " + what + `. It needs an admin token, and every
download is written to the server's audit log.

The file holds credentials: it is written to stdout, or with --file to a
file of mode 0600, which is never overwritten without --force.`,
		Example: fmt.Sprintf("  rezusctl %s production -f production.%s\n  rezusctl %s production > %s", name, name, name, name),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("give one TENANT: rezusctl %s TENANT", name)}
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			rt, _ := lookupType("tenants")
			return completeNames(cmd, rt, toComplete), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if file != "" && !force {
				if _, err := os.Lstat(file); err == nil {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("%s exists; give --force to overwrite it", file)}
				} else if !errors.Is(err, fs.ErrNotExist) {
					return usageError(err)
				}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			b, err := fetchDownload(cmd.Context(), c, path(args[0]))
			if err != nil {
				return apiError(err)
			}
			if file == "" {
				_, err := cmd.OutOrStdout().Write(b)
				return usageError(err)
			}
			if err := writeSecretFile(file, b, force); err != nil {
				return usageError(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s of tenant %s to %s\n", name, args[0], file)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write to `FILE` (mode 0600) instead of stdout")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite --file if it exists")
	return cmd
}

func fetchDownload(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	return c.GetBytes(ctx, path)
}

// writeSecretFile writes b to path with mode 0600 through a temporary file
// in the same directory. Without force it refuses an existing path, also
// one created meanwhile.
func writeSecretFile(path string, b []byte, force bool) error {
	dir := filepath.Dir(path)
	if !force {
		// O_EXCL closes the race between the check and the write.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s exists; give --force to overwrite it", path)
			}
			return err
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		return f.Close()
	}
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
