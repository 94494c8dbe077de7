package reconciler

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
)

// deleteState removes a tenant's current state through the state backend,
// the way an operator would. The backend keeps its history.
func deleteState(ctx context.Context, creds tofu.Creds) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, creds.Address, nil)
	if err != nil {
		return err
	}
	if creds.Username != "" || creds.Password != "" {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent, http.StatusNotFound:
		return nil
	}
	return fmt.Errorf("delete state: %s: %s", resp.Status, body)
}
