package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultHTTPTimeout bounds one status request when no Client is given.
const DefaultHTTPTimeout = 30 * time.Second

// maxErrorBody is how much of an error answer is read for its message.
const maxErrorBody = 8 << 10

// poster sends the JSON requests of a forge reporter.
type poster struct {
	name   string
	client *http.Client
	token  Token
	// auth sets the credential header(s) of a request.
	auth func(h http.Header)
	now  func() time.Time
}

func newPoster(name string, client *http.Client, token Token, auth func(http.Header)) *poster {
	if client == nil {
		client = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	// A copy that never follows redirects: a redirect to another host
	// would carry a credential header such as PRIVATE-TOKEN along.
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &poster{name: name, client: &c, token: token, auth: auth, now: time.Now}
}

// checkAPIURL parses a forge API base URL and drops a trailing slash.
func checkAPIURL(what, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("%s API URL: %w", what, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%s API URL %s: want an http:// or https:// URL", what, u.Redacted())
	}
	if u.User != nil {
		return "", fmt.Errorf("%s API URL %s: credentials do not belong in the URL: use a token", what, u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%s API URL %s: a query or fragment is not allowed", what, u.Redacted())
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// post sends body as JSON to endpoint with the extra header and checks
// the answer is a 2xx.
func (p *poster) post(ctx context.Context, endpoint string, body any, header http.Header) error {
	b, err := json.Marshal(body)
	if err != nil {
		return permanent{fmt.Errorf("%s: encode request: %w", p.name, err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(b))
	if err != nil {
		return permanent{fmt.Errorf("%s: %w", p.name, err)}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "rezuscloud")
	p.auth(req.Header)
	resp, err := p.client.Do(req)
	if err != nil {
		// A *url.Error names the method and URL; neither holds the token.
		return fmt.Errorf("%s: %w", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	he := &HTTPError{
		Reporter:   p.name,
		Method:     http.MethodPost,
		URL:        endpoint,
		StatusCode: resp.StatusCode,
		Message:    p.message(raw, resp),
	}
	he.RetryAfter, he.RateLimited = p.retryAfter(resp)
	return he
}

// message picks the forge's error message out of an answer: the "message"
// or "error" of a JSON body, or its text. The token is cut out of it.
func (p *poster) message(raw []byte, resp *http.Response) string {
	var msg string
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		msg = "redirected to " + resp.Header.Get("Location") + ": set the API URL to where the API is"
	} else {
		var body struct {
			Message json.RawMessage `json:"message"`
			Error   json.RawMessage `json:"error"`
		}
		if json.Unmarshal(raw, &body) == nil && (body.Message != nil || body.Error != nil) {
			field := body.Message
			if field == nil {
				field = body.Error
			}
			var s string
			if json.Unmarshal(field, &s) == nil {
				msg = s
			} else {
				msg = string(field)
			}
		} else {
			msg = string(raw)
		}
	}
	if p.token != "" {
		msg = strings.ReplaceAll(msg, string(p.token), redacted)
	}
	return truncate(msg, 300)
}

// retryAfter reads the wait an answer asks for: Retry-After in seconds or
// as a date, or for an exhausted GitHub rate limit (x-ratelimit-remaining
// 0) the time until x-ratelimit-reset. rateLimited is true for a 403 or
// 429 that says a rate limit is exhausted.
func (p *poster) retryAfter(resp *http.Response) (wait time.Duration, rateLimited bool) {
	now := p.now()
	exhausted := resp.Header.Get("X-Ratelimit-Remaining") == "0"
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		wait = time.Duration(min(s, maxRetryAfterSeconds)) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		wait = max(0, min(t.Sub(now), maxRetryAfterSeconds*time.Second))
	} else if exhausted {
		if s, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			wait = max(0, min(time.Unix(s, 0).Sub(now), maxRetryAfterSeconds*time.Second))
		}
	}
	limitStatus := resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests
	return wait, limitStatus && (exhausted || v != "")
}

// maxRetryAfterSeconds bounds the wait a forge may ask for.
const maxRetryAfterSeconds = 3600
