package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
)

const notifyLong = `Notify works with the server's notifications: the chat, incident and webhook
providers that its operator configured with 'rezuscloud serve --notifications'.

'rezusctl notify test PROVIDER' asks the server to send a test message to the
provider now (POST /api/v1/notifications/PROVIDER/test, which needs a token of
role edit), and says whether the provider took it. It exits 0 when it did; 1
when the provider did not take it (the provider's answer is printed, without
its secrets) or the server has no provider of that name; 2 when the server
has no notifications or the request fails otherwise.`

func newNotifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notify",
		Short: "Work with the server's notifications",
		Long:  notifyLong,
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "test PROVIDER",
		Short:   "Send a test message to a provider of the server's notifications",
		Long:    notifyLong,
		Example: "  rezusctl notify test team-slack",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "give one PROVIDER: rezusctl notify test PROVIDER"}
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return runNotifyTest(cmd.Context(), c, args[0], cmd.OutOrStdout())
		},
	})
	return cmd
}

// runNotifyTest sends the test message and says how it went.
func runNotifyTest(ctx context.Context, c *client.Client, provider string, out io.Writer) error {
	err := c.TestNotification(ctx, provider)
	if err == nil {
		fmt.Fprintf(out, "✔ %s took the test message\n", provider)
		return nil
	}
	switch client.Code(err) {
	case http.StatusBadGateway:
		return &exitError{code: exitFailed, msg: statusMessage(err)}
	case http.StatusNotImplemented:
		return &exitError{code: exitUsage, msg: statusMessage(err)}
	}
	return apiError(err)
}

// statusMessage is the server's message of a *client.StatusError, else
// the error's text.
func statusMessage(err error) string {
	var se *client.StatusError
	if errors.As(err, &se) && se.Message != "" {
		return se.Message
	}
	return err.Error()
}
