package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/client"
)

// tokenWords are the words that make get list API tokens.
var tokenWords = []string{"tokens", "token"}

// runGetTokens prints the server's API tokens (an admin's request): a
// table, JSON or YAML (as {"items":[…],"total":N}) or token/NAME lines.
// With names, only those; one that is not there makes it exit 1.
func runGetTokens(ctx context.Context, c *client.Client, stdout, stderr io.Writer, names []string, o *getOptions, now time.Time) error {
	if o.selector != "" || o.watch || o.watchOnly || o.tenant != "" {
		return &exitError{code: exitUsage, msg: "tokens take no --selector, --tenant or --watch"}
	}
	list, err := c.ListTokens(ctx)
	if err != nil {
		return apiError(err)
	}
	missing := 0
	if len(names) > 0 {
		var picked []api.TokenInfo
		for _, n := range names {
			i := slices.IndexFunc(list, func(t api.TokenInfo) bool { return t.Name == n })
			if i < 0 {
				missing++
				fmt.Fprintf(stderr, "error: token %q not found\n", n)
				continue
			}
			picked = append(picked, list[i])
		}
		list = picked
	}
	if err := printTokens(stdout, stderr, list, len(names) > 0, o, now); err != nil {
		return usageError(err)
	}
	if missing > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

// printTokens writes the tokens in the format o asks for; picked says
// that the user named them.
func printTokens(stdout, stderr io.Writer, list []api.TokenInfo, picked bool, o *getOptions, now time.Time) error {
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
		for _, t := range list {
			if _, err := fmt.Fprintf(stdout, "token/%s\n", t.Name); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		if !picked {
			fmt.Fprintln(stderr, "No tokens found.")
		}
		return nil
	}
	header := []string{"NAME", "OWNER", "ROLE", "SOURCE", "EXPIRES", "LAST USED"}
	rows := make([][]string, 0, len(list))
	for _, t := range list {
		rows = append(rows, []string{t.Name, orNone(t.Owner), t.Role, t.Source, expiresText(t, now), lastUsedText(t.LastUsed, now)})
	}
	return printTable(stdout, header, rows, o.noHeaders)
}

// expiresText is the EXPIRES column: never, the time and how far off it
// is, or when it expired.
func expiresText(t api.TokenInfo, now time.Time) string {
	if t.ExpiresAt == nil {
		return "never"
	}
	at := t.ExpiresAt.UTC().Format(time.RFC3339)
	if t.Expired || !now.Before(*t.ExpiresAt) {
		return at + " (expired " + humanDuration(now.Sub(*t.ExpiresAt)) + " ago)"
	}
	return at + " (in " + humanDuration(t.ExpiresAt.Sub(now)) + ")"
}

// lastUsedText is the LAST USED column: never, or how long ago.
func lastUsedText(at *time.Time, now time.Time) string {
	if at == nil {
		return "never"
	}
	return humanDuration(now.Sub(*at)) + " ago"
}
