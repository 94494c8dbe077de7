package tofu

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// DefaultMaxStateBytes bounds the state a StateClient reads unless told
// otherwise: the state backend's own default bound on the states it
// takes.
const DefaultMaxStateBytes = 64 << 20

// maxErrorBody bounds what is read of an answer that refuses a request,
// for its error.
const maxErrorBody = 4 << 10

// StateClient speaks the HTTP state backend protocol to one state, with a
// run's credentials, as tofu does: GET, POST, DELETE, LOCK and UNLOCK,
// each with basic auth, and a body's Content-MD5. It is the server's one
// client of its own state backend: the runner reads states through it and
// pushes what an interrupted apply saved (pushErrored), and the
// reconciler deletes the state of a tenant it removed. Its errors name the
// method, the state's address and what the backend answered; they never
// hold the credentials.
type StateClient struct {
	Creds Creds
	// MaxBytes bounds the state Get reads; a larger one is an error.
	// Default DefaultMaxStateBytes.
	MaxBytes int64
	// HTTP sends the requests; nil means stateHTTP.
	HTTP *http.Client
}

// StateAnswerTimeout bounds how long a StateClient waits for the state
// backend to begin its answer. Among replicas the address is often a load
// balancer, and a kept-alive connection through it may lead to a replica
// that was paused: the request fails after this instead of waiting for as
// long as the pause, and its connection is dropped, so that the next
// request takes a new one to a replica that answers.
const StateAnswerTimeout = 20 * time.Second

// stateHTTP is the StateClient's default client.
var stateHTTP = answerBounded(StateAnswerTimeout)

// answerBounded returns a client that waits at most d for each answer to
// begin.
func answerBounded(d time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = d
	return &http.Client{Transport: t}
}

// Get returns the current state, or nil when there is none.
func (c StateClient) Get(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNoContent, http.StatusNotFound:
		return nil, nil
	default:
		return nil, c.refused(http.MethodGet, resp)
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxStateBytes
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, c.failed(http.MethodGet, err)
	}
	if int64(len(b)) > limit {
		return nil, c.failed(http.MethodGet, fmt.Errorf("the state is larger than %d bytes", limit))
	}
	return b, nil
}

// Post writes state, under the lock of lockID (empty: none).
func (c StateClient) Post(ctx context.Context, lockID string, state []byte) error {
	query := ""
	if lockID != "" {
		query = "?" + url.Values{"ID": {lockID}}.Encode()
	}
	return c.expect(ctx, http.MethodPost, query, state, http.StatusOK)
}

// Delete removes the current state; the backend keeps its history. A
// state that is not there counts as deleted.
func (c StateClient) Delete(ctx context.Context) error {
	return c.expect(ctx, http.MethodDelete, "", nil, http.StatusOK, http.StatusNoContent, http.StatusNotFound)
}

// Lock takes the state's lock with info, tofu's LockInfo JSON. When
// another holds it, the error holds the holder's LockInfo.
func (c StateClient) Lock(ctx context.Context, info []byte) error {
	return c.expect(ctx, "LOCK", "", info, http.StatusOK)
}

// Unlock releases the lock that Lock took with info.
func (c StateClient) Unlock(ctx context.Context, info []byte) error {
	return c.expect(ctx, "UNLOCK", "", info, http.StatusOK)
}

// expect sends one request and fails unless the answer has one of the
// codes ok.
func (c StateClient) expect(ctx context.Context, method, query string, body []byte, ok ...int) error {
	resp, err := c.do(ctx, method, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	for _, code := range ok {
		if resp.StatusCode == code {
			return nil
		}
	}
	return c.refused(method, resp)
}

// do sends one request to the state's address with query appended.
func (c StateClient) do(ctx context.Context, method, query string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Creds.Address+query, rd)
	if err != nil {
		return nil, c.failed(method, err)
	}
	if body != nil {
		sum := md5.Sum(body)
		req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Creds.Username != "" || c.Creds.Password != "" {
		req.SetBasicAuth(c.Creds.Username, c.Creds.Password)
	}
	hc := c.HTTP
	if hc == nil {
		hc = stateHTTP
	}
	resp, err := hc.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // which names the method and address again
	}
	if err != nil {
		return nil, c.failed(method, err)
	}
	return resp, nil
}

// failed is the error of a request that got no usable answer.
func (c StateClient) failed(method string, err error) error {
	return fmt.Errorf("state backend: %s %s: %w", method, c.Creds.Address, err)
}

// refused is the error of an answer with an unexpected code: its status
// and what the backend said, the message of an API error or the start of
// any other body (the holder's LockInfo of a held lock).
func (c StateClient) refused(method string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var apiErr struct {
		Message string `json:"message"`
	}
	msg := string(bytes.TrimSpace(body))
	if json.Unmarshal(body, &apiErr) == nil && apiErr.Message != "" {
		msg = apiErr.Message
	}
	if msg == "" {
		return fmt.Errorf("state backend: %s %s: %s", method, c.Creds.Address, resp.Status)
	}
	return fmt.Errorf("state backend: %s %s: %s: %s", method, c.Creds.Address, resp.Status, msg)
}
