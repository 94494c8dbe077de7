package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// StoreBackupPath is the admin-only download of a consistent copy of the
// server's whole store.
const StoreBackupPath = "/api/v1/admin/store"

// StoreBackup streams a consistent copy of the server's store into w (an
// admin's token only) and returns the bytes written. When the download
// breaks off, or w fails, it returns an error, and what w took is a part
// to discard.
func (c *Client) StoreBackup(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, StoreBackupPath, nil, "application/octet-stream")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body := &readErr{r: resp.Body}
	n, err := io.Copy(w, body)
	switch {
	case err == nil:
		return n, nil
	case ctx.Err() != nil:
		return n, ctx.Err()
	case body.err != nil:
		return n, &ConnError{Server: c.Server(), Err: fmt.Errorf("the download of the store broke off after %d bytes: %w", n, body.err)}
	}
	return n, err
}

// readErr remembers the error its reader returned, other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// ReadTokenFile reads a token file: the token is its first line, without
// surrounding white space. The token itself never appears in an error.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}
