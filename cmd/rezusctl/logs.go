package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

const logsLong = `Logs prints the log of a service of a machine, read from the machine's Talos
API by the server, as kubectl logs does for a container. --dmesg prints the
machine's kernel log instead. With --follow/-f it keeps printing new lines
until it is interrupted, the machine ends the stream (it reboots) or the
server shuts down.

MACHINE is a machine's ID, host name or management address. Its tenant is
found from the machine; give --tenant/-t when a host name or address is
used in more than one tenant.

Reading logs needs a token of role edit or admin, and every access is
written to the server's audit log. --tail is at most 10000 (the server's
bound); without it the server sends its default of the last 1000 lines.`

func newLogsCmd() *cobra.Command {
	var (
		tenant, service string
		follow, dmesg   bool
		tail            int
	)
	cmd := &cobra.Command{
		Use:   "logs MACHINE",
		Short: "Print the log of a service of a machine, or its kernel log",
		Long:  logsLong,
		Example: `  rezusctl logs sim-25b33181a5738e00
  rezusctl logs talos-3f2-9a1 --service kubelet --tail 50
  rezusctl logs 127.1.0.4 -t production -f
  rezusctl logs sim-25b33181a5738e00 --dmesg`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "give one MACHINE: rezusctl logs MACHINE [-t TENANT] [-c SERVICE] [-f] [--tail N]"}
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			rt, _ := lookupType("machines")
			return completeNames(cmd, rt, toComplete), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if dmesg && cmd.Flags().Changed("service") {
				return &exitError{code: exitUsage, msg: "--dmesg is the kernel's log: it takes no --service"}
			}
			if cmd.Flags().Changed("tail") && (tail < 0 || tail > 10000) {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--tail %d: want 0 to 10000", tail)}
			}
			if !cmd.Flags().Changed("tail") {
				tail = -1
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			m, err := findMachine(cmd.Context(), c, tenant, args[0])
			if err != nil {
				return apiError(err)
			}
			body, err := c.Logs(cmd.Context(), m.Spec.Tenant, m.Metadata.Name, client.LogOptions{Dmesg: dmesg, Service: service, Follow: follow, TailLines: tail})
			if err != nil {
				return apiError(err)
			}
			defer body.Close()
			_, err = io.Copy(cmd.OutOrStdout(), body)
			if err != nil && errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return nil // interrupted: a follow ends so
			}
			return apiError(err)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&tenant, "tenant", "t", "", "the tenant of the machine, when its host name or address is not unique")
	f.StringVarP(&service, "service", "c", "", "the service whose log to print: machined (default), kubelet, etcd, apid, containerd, ...")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	f.IntVar(&tail, "tail", 0, "print the last `N` lines first (0 to 10000; default: the server's 1000)")
	f.BoolVar(&dmesg, "dmesg", false, "print the kernel log instead of a service's")
	registerCompletions(cmd)
	return cmd
}

// findMachine finds a machine by ID, host name or management address, in
// one tenant or in all.
func findMachine(ctx context.Context, c *client.Client, tenant, key string) (*schema.Machine, error) {
	m, err := c.Machine(ctx, "", key)
	if err == nil {
		if tenant != "" && m.Spec.Tenant != tenant {
			return nil, &exitError{code: exitFailed, msg: fmt.Sprintf("machine %s belongs to tenant %s, not %s", key, m.Spec.Tenant, tenant)}
		}
		return m, nil
	}
	if !client.IsNotFound(err) {
		return nil, err
	}
	all, err := c.Machines(ctx, tenant, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	var found []schema.Machine
	for _, m := range all {
		if m.Spec.Hostname == key || m.Spec.ManagementAddress == key {
			found = append(found, m)
		}
	}
	where := ""
	if tenant != "" {
		where = " in tenant " + tenant
	}
	switch len(found) {
	case 0:
		return nil, &exitError{code: exitFailed, msg: fmt.Sprintf("no machine %q%s: give a machine's ID, host name or address (rezusctl get machines lists them)", key, where)}
	case 1:
		return &found[0], nil
	}
	var names []string
	for _, m := range found {
		names = append(names, m.Spec.Tenant+"/"+m.Metadata.Name)
	}
	sort.Strings(names)
	return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%q names %d machines (%s): give --tenant/-t or the machine's ID", key, len(found), strings.Join(names, ", "))}
}
