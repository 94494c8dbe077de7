package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Completion asks the server for names; it gives up quickly rather than
// hang the shell.
const completionTimeout = 3 * time.Second

// completeTypeAndNames completes get's arguments: a resource type, then
// the names of that type.
func completeTypeAndNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 && (slices.Contains(backupWords, args[0]) || slices.Contains(tokenWords, args[0])) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	types, dir := completeFor(cmd, args, toComplete, nil)
	if len(args) == 0 {
		types = append(types, backupWords[0], tokenWords[0])
	}
	return types, dir
}

// completeFor completes a resource type among kinds (all when nil), then
// names of it.
func completeFor(cmd *cobra.Command, args []string, toComplete string, kinds []string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		var out []string
		for _, rt := range resourceTypes {
			if kinds == nil || slices.Contains(kinds, rt.kind) {
				out = append(out, rt.name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	rt, err := lookupType(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return completeNames(cmd, rt, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNames lists the names of a type that start with prefix.
func completeNames(cmd *cobra.Command, rt *resourceType, prefix string) []string {
	c, err := newClient(cmd)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	tenant := flagString(cmd, "tenant")
	if rt.kind == schema.KindTenant || rt.kind == schema.KindProvider {
		tenant = ""
	}
	items, err := listObjects(ctx, c, rt, tenant, "")
	if err != nil {
		return nil
	}
	var out []string
	for _, raw := range items {
		h, err := decodeHeader(raw)
		if err != nil {
			continue
		}
		name := h.Metadata.Name
		switch {
		case rt.scoped && tenant == "":
			name = h.tenantOf() + "/" + name
		case rt.kind == schema.KindCommit:
			if c, err := decodeAs[schema.Commit](raw); err == nil {
				name = shortSHA(c.Spec.SHA, c.Metadata.Name)
			}
		}
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// registerCompletions completes the --tenant and --output flags of cmd.
func registerCompletions(cmd *cobra.Command) {
	if cmd.Flags().Lookup("tenant") != nil {
		cmd.RegisterFlagCompletionFunc("tenant", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			rt, _ := lookupType("tenants")
			return completeNames(cmd, rt, toComplete), cobra.ShellCompDirectiveNoFileComp
		})
	}
	if cmd.Flags().Lookup("output") != nil {
		cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{outTable, outWide, outJSON, outYAML, outName}, cobra.ShellCompDirectiveNoFileComp
		})
	}
}
