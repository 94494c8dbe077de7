package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// backupWords are the words that make get list backups.
var backupWords = []string{"backups", "backup"}

// backupPoll is how often backup --wait reads the tenant.
const backupPoll = 500 * time.Millisecond

const backupLong = `Backup asks the server to take a backup of the tenant's etcd now
(POST /api/v1/tenants/TENANT/backups, which needs a token of role edit), as
'rezusctl reconcile' hurries a run. The backup runs in the server's backup
worker, off the apply path, and changes nothing of the cluster; it is
encrypted before it leaves the server and kept in the server's backup store
with the scheduled ones (spec.backup.keep counts them all).

The command returns once the server queued the backup. With --wait it waits
until the tenant's status shows a new backup, and prints its ID; it exits 1
when the backup fails with an error the tenant's status did not show before,
or after --timeout.

'rezusctl get backups -t TENANT' lists the backups; 'rezusctl backup download
TENANT ID -o FILE' downloads one (admin only). A server without a backup
store answers 503.`

func newBackupCmd() *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "backup TENANT",
		Short: "Take a backup of a tenant's etcd now, or download one",
		Long:  backupLong,
		Example: `  rezusctl backup production
  rezusctl backup production --wait
  rezusctl get backups -t production
  rezusctl backup download production 20261205T083000Z-1a2b3c4d -o production.tar`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "give one TENANT: rezusctl backup TENANT"}
			}
			return nil
		},
		ValidArgsFunction: completeTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait && timeout <= 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--timeout %v: want a positive duration", timeout)}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return apiError(runBackup(cmd.Context(), c, args[0], wait, timeout, cmd.OutOrStdout()))
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the backup to be written, and print its ID")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, how long to wait")
	cmd.AddCommand(newBackupDownloadCmd())
	return cmd
}

// completeTenant completes a command's one TENANT argument.
func completeTenant(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	rt, _ := lookupType("tenants")
	return completeNames(cmd, rt, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// runBackup requests a backup and, with wait, waits for the tenant's
// status to show it.
func runBackup(ctx context.Context, c *client.Client, tenant string, wait bool, timeout time.Duration, out io.Writer) error {
	var before schema.BackupStatus
	if wait {
		t, err := c.Tenant(ctx, tenant)
		if err != nil {
			return err
		}
		if t.Status.Backup != nil {
			before = *t.Status.Backup
		}
	}
	res, err := c.RequestBackup(ctx, tenant)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "► %s: %s\n", tenant, res.Message)
	if !wait {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(backupPoll)
	defer tick.Stop()
	for {
		t, err := c.Tenant(ctx, tenant)
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("tenant %s: no new backup within --timeout %v", tenant, timeout)}
			}
			return err
		}
		if done, err := backupOutcome(before, t.Status.Backup); done {
			if err != nil {
				fmt.Fprintf(out, "✗ %s: %v\n", tenant, err)
				return &exitError{code: exitFailed, msg: fmt.Sprintf("backup of %s failed: %v", tenant, err)}
			}
			b := t.Status.Backup
			fmt.Fprintf(out, "✔ %s: backup %s written (%s)\n", tenant, orNone(b.LastID), bytesText(b.SizeBytes))
			return nil
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("tenant %s: no new backup within --timeout %v", tenant, timeout)
			if b := t.Status.Backup; b != nil && b.LastError != "" {
				msg += "; the last error: " + firstLine(b.LastError, 200)
			}
			return &exitError{code: exitFailed, msg: msg}
		case <-tick.C:
		}
	}
}

// backupOutcome compares a tenant's status.backup before a requested
// backup with its status now: a new last success is the backup written; an
// attempt after the one before that ended in an error not seen before is
// its failure.
func backupOutcome(was schema.BackupStatus, now *schema.BackupStatus) (bool, error) {
	if now == nil {
		return false, nil
	}
	if now.LastSuccess.After(was.LastSuccess) || (now.LastID != "" && now.LastID != was.LastID) {
		return true, nil
	}
	if now.LastAttempt.After(was.LastAttempt) && now.LastError != "" && now.LastError != was.LastError {
		return true, errors.New(firstLine(now.LastError, 200))
	}
	return false, nil
}

func newBackupDownloadCmd() *cobra.Command {
	var (
		file  string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "download TENANT ID -o FILE",
		Short: "Download a backup of a tenant, encrypted, as a tar",
		Long: `Download writes one backup of the tenant, as the server's backup store
holds it, to FILE: a tar of its objects (manifest.age, snapshot.age,
state.age), each encrypted with age to the server's backup keys. It needs an
admin token, and every download is written to the server's audit log.

FILE gets mode 0600 and is written whole or not at all: the download goes to
a temporary file beside it first. An existing FILE is never overwritten
without --force. -o - writes to stdout.`,
		Example: "  rezusctl backup download production 20261205T083000Z-1a2b3c4d -o production.tar",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return &exitError{code: exitUsage, msg: "give a TENANT and a backup ID: rezusctl backup download TENANT ID -o FILE"}
			}
			return nil
		},
		ValidArgsFunction: completeTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, id := args[0], args[1]
			if file == "" {
				return &exitError{code: exitUsage, msg: "give -o FILE (or -o - for stdout)"}
			}
			if err := schema.CheckBackupID(id); err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if file == "-" {
				_, err := c.DownloadBackup(cmd.Context(), tenant, id, cmd.OutOrStdout())
				return apiError(err)
			}
			var n int64
			write := func(w io.Writer) error {
				var err error
				n, err = c.DownloadBackup(cmd.Context(), tenant, id, w)
				return err
			}
			if force {
				err = atomicfile.WriteFrom(file, 0o600, write)
			} else {
				err = atomicfile.CreateFrom(file, 0o600, write)
			}
			switch {
			case errors.Is(err, fs.ErrExist):
				return &exitError{code: exitUsage, msg: fmt.Sprintf("%s exists; give --force to overwrite it", file)}
			case err != nil && (client.Code(err) != 0 || client.IsConn(err)):
				return apiError(err)
			case err != nil:
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote backup %s of tenant %s to %s (%s)\n", id, tenant, file, bytesText(n))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "write to `FILE` (mode 0600); - for stdout")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite FILE if it exists")
	return cmd
}

// runGetBackups prints the backups of a tenant: a table, JSON or YAML (as
// {"items":[…],"total":N}) or backup/TENANT/ID lines. With ids, only
// those; one that is not there makes it exit 1.
func runGetBackups(ctx context.Context, c *client.Client, stdout, stderr io.Writer, ids []string, o *getOptions) error {
	if o.tenant == "" {
		return &exitError{code: exitUsage, msg: "backups belong to a tenant: give --tenant/-t TENANT"}
	}
	if o.selector != "" || o.watch || o.watchOnly {
		return &exitError{code: exitUsage, msg: "backups take no --selector and no --watch"}
	}
	list, err := c.ListBackups(ctx, o.tenant)
	if err != nil {
		return apiError(err)
	}
	missing := 0
	if len(ids) > 0 {
		var picked []schema.BackupInfo
		for _, id := range ids {
			i := slices.IndexFunc(list, func(b schema.BackupInfo) bool { return b.ID == id })
			if i < 0 {
				missing++
				fmt.Fprintf(stderr, "error: backup %q of tenant %s not found\n", id, o.tenant)
				continue
			}
			picked = append(picked, list[i])
		}
		list = picked
	}
	if err := printBackups(stdout, stderr, o.tenant, list, len(ids) > 0, o); err != nil {
		return usageError(err)
	}
	if missing > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

// printBackups writes the backups list of a tenant in the format o asks
// for; picked says that the user named them.
func printBackups(stdout, stderr io.Writer, tenant string, list []schema.BackupInfo, picked bool, o *getOptions) error {
	switch o.output {
	case outJSON, outYAML:
		b, err := json.Marshal(api.NewList(list))
		if err != nil {
			return err
		}
		if o.output == outJSON {
			return printJSON(stdout, b)
		}
		return printYAML(stdout, b)
	case outName:
		for _, b := range list {
			if _, err := fmt.Fprintf(stdout, "backup/%s/%s\n", tenant, b.ID); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		if !picked {
			fmt.Fprintf(stderr, "No backups of tenant %s.\n", tenant)
		}
		return nil
	}
	wide := o.output == outWide
	header := []string{"ID", "TIME", "MACHINE", "SIZE", "REASON", "COMMIT"}
	if wide {
		header = append(header, "ETCD REVISION", "ETCD DB", "TALOS", "KUBERNETES")
	}
	rows := make([][]string, 0, len(list))
	for _, b := range list {
		r := []string{b.ID, b.Time.UTC().Format(time.RFC3339), orNone(b.Machine), bytesText(b.SizeBytes), orNone(firstLine(b.Reason, 60)), orNone(shortSHA(b.Commit, ""))}
		if wide {
			r = append(r, strconv.FormatUint(b.Etcd.RaftIndex, 10), bytesText(b.Etcd.DBSizeBytes), orNone(b.TalosVersion), orNone(b.KubernetesVersion))
		}
		rows = append(rows, r)
	}
	return printTable(stdout, header, rows, o.noHeaders)
}

// bytesText is a size in bytes as people read it: 512 B, 1.5 KiB, 240
// MiB.
func bytesText(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// backupPolicyText says what a spec.backup declares: "every 6h, keep 14",
// "at 0 3 * * * (Europe/Berlin), keep 14"; "" for none.
func backupPolicyText(p *schema.BackupPolicy) string {
	if p == nil {
		return ""
	}
	when := "every " + p.Interval
	if p.Interval == "" {
		when = "at " + p.Schedule
		if p.TimeZone != "" {
			when += " (" + p.TimeZone + ")"
		}
	}
	return when + ", keep " + strconv.Itoa(p.Keep)
}

// noBackup is what a tenant without spec.backup shows where its backups
// would be.
const noBackup = "no etcd backup"

// backupWord is the BACKUP column of a tenant: "no etcd backup", "none
// yet", "failing: …", or how long ago the last one was and how many
// there are ("2h ago, 14 kept").
func backupWord(t *schema.Tenant, now time.Time) string {
	st := t.Status.Backup
	if !t.BackupDeclared() {
		return noBackup
	}
	if st == nil {
		return "none yet"
	}
	if st.LastError != "" && !st.LastAttempt.Before(st.LastSuccess) {
		return firstLine("failing: "+st.LastError, 40)
	}
	if st.LastSuccess.IsZero() {
		return "none yet"
	}
	return fmt.Sprintf("%s ago, %d kept", humanDuration(now.Sub(st.LastSuccess)), st.Count)
}

// backupStatus writes a tenant's backups in describe: its policy's state,
// or "no etcd backup".
func (d *describer) backupStatus(t *schema.Tenant) {
	st := t.Status.Backup
	if !t.BackupDeclared() {
		d.kv(1, "Backup", noBackup)
	} else if st == nil {
		d.kv(1, "Backup", "none yet")
	} else {
		d.line(1, "Backup:")
		d.kv(2, "Last Success", d.when(st.LastSuccess))
		d.kv(2, "Last Attempt", d.when(st.LastAttempt))
		d.kv(2, "Last Error", firstLine(st.LastError, 200))
		d.kv(2, "Next", d.until(st.Next))
		d.kv(2, "Count", strconv.Itoa(st.Count))
		if st.LastID != "" {
			d.kv(2, "Last", st.LastID+" ("+bytesText(st.SizeBytes)+")")
		} else {
			d.kv(2, "Last", "")
		}
	}
	if st != nil && st.Restore != nil {
		r := st.Restore
		what := r.Backup + ": " + orNone(r.Phase)
		if r.Message != "" {
			what += " (" + firstLine(r.Message, 160) + ")"
		}
		d.kv(1, "Restore", strings.TrimSpace(what))
	}
}
