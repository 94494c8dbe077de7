// Package client is the HTTP client of RezusCloud's read API, as rezusctl
// and other programs use it: lists, objects, the server's status and
// version, the admin-only downloads (a tenant's backups and a copy of the
// server's store among them), requests of a reconcile or a backup, watches
// that resume after a dropped connection, and the token files its users
// keep.
//
// It also holds what a client proves itself with (Credential): a static
// token, or a login that `rezusctl login` stored (Refreshing), whose
// OpenID Connect ID token it renews at the provider's token endpoint with
// the refresh token before it expires; and the calls of the auth
// endpoints (login, logout, whoami, the single sign-on config) and of a
// provider's discovery document and revocation.
//
// It speaks only the wire shapes of backend/api and the resource types of
// schema (and of internal/preview for plan previews). It must not import
// the server (backend) or the reconciler, and it never changes a resource:
// the API is read-only, and a preview plans without applying. The secret
// it sends travels only in the Authorization header (and a refresh token
// only to the provider); none appears in an error, a trace line or a URL.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// DefaultServer is the server a client talks to when none is configured.
const DefaultServer = "http://127.0.0.1:8080"

// MaxPage is the largest page a list request asks for; the server refuses
// larger limits.
const MaxPage = 1000

// maxBody bounds a non-streaming answer. The largest objects (commits with
// the tail of tofu's output) are far smaller.
const maxBody = 64 << 20

// Options configures New.
type Options struct {
	// Server is the base URL of the server, http or https, e.g.
	// https://rezuscloud.example.com. Default DefaultServer. A path is
	// kept as a prefix, for servers behind a proxy.
	Server string
	// Token is sent as "Authorization: Bearer TOKEN". Empty sends none,
	// which a server without a tokens file accepts.
	Token string
	// Credential, when set, gives the bearer of each request instead of
	// Token: a stored login that renews itself (Refreshing), say.
	Credential Credential
	// HTTPClient sends the requests. Default: a client whose dials and
	// response headers time out after 30s and whose bodies never do, so
	// that watches can stay open.
	HTTPClient *http.Client
	// Timeout bounds each request that is not a watch, body included.
	// Zero means no bound beyond the context's.
	Timeout time.Duration
	// UserAgent is sent as User-Agent. Default "rezuscloud-client".
	UserAgent string
	// Trace, when set, is called once per request with its method, URL,
	// status (0 when no answer came) and duration. It never sees the
	// token.
	Trace func(method, url string, status int, d time.Duration)
}

// Client talks to one server. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	cred    Credential
	http    *http.Client
	timeout time.Duration
	agent   string
	trace   func(string, string, int, time.Duration)
	// page is the limit of each list request: MaxPage, less in tests.
	page int
}

// New returns a client of the server opts names. It checks the URL but
// does not connect.
func New(opts Options) (*Client, error) {
	server := opts.Server
	if server == "" {
		server = DefaultServer
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %v", redactURL(server), errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("server URL %q: want an http:// or https:// URL", redactURL(server))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("server URL %q: no host", redactURL(server))
	}
	if u.User != nil {
		return nil, fmt.Errorf("server URL %q: credentials do not belong in the URL; give a token instead", u.Redacted())
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   4,
			ForceAttemptHTTP2:     true,
		}}
	}
	agent := opts.UserAgent
	if agent == "" {
		agent = "rezuscloud-client"
	}
	cred := opts.Credential
	if cred == nil && opts.Token != "" {
		cred = StaticToken(opts.Token)
	}
	return &Client{base: u, cred: cred, http: hc, timeout: opts.Timeout, agent: agent, trace: opts.Trace, page: MaxPage}, nil
}

// Server returns the server's base URL.
func (c *Client) Server() string { return c.base.String() }

// redactURL hides the password of a URL that may carry one, also when the
// URL does not parse.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "xxxxx" + s[i:]
		}
	}
	return s
}

// url returns the URL of path (which starts with "/") with query q.
func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	raw := c.base.EscapedPath() + path
	if p, err := url.PathUnescape(raw); err == nil {
		u.Path, u.RawPath = p, raw
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends a GET of path and returns the answer when its status is 2xx;
// any other status comes back as a *StatusError, no answer at all as a
// *ConnError.
func (c *Client) do(ctx context.Context, path string, q url.Values, accept string) (*http.Response, error) {
	target := c.url(path, q)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("User-Agent", c.agent)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if err := c.authorize(ctx, req); err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.traced(target, 0, start)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Server: c.Server(), Err: err}
	}
	c.traced(target, resp.StatusCode, start)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, statusError(resp, path)
}

// authorize gives req the client's bearer, if it has one.
func (c *Client) authorize(ctx context.Context, req *http.Request) error {
	if c.cred == nil {
		return nil
	}
	secret, err := c.cred.Bearer(ctx)
	if err != nil {
		return err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	return nil
}

func (c *Client) traced(target string, status int, start time.Time) {
	if c.trace != nil {
		c.trace(http.MethodGet, target, status, time.Since(start))
	}
}

// statusError reads a failed answer: the API's error body when it is one,
// else the start of whatever the server sent.
func statusError(resp *http.Response, path string) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &StatusError{Path: path, Code: resp.StatusCode, Reason: api.ReasonFor(resp.StatusCode)}
	var ae api.Error
	if json.Unmarshal(body, &ae) == nil && ae.Message != "" {
		e.Message = ae.Message
		if ae.Reason != "" {
			e.Reason = ae.Reason
		}
		return e
	}
	msg := strings.TrimSpace(string(body))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// getBody returns the whole body of a GET of path.
func (c *Client) getBody(ctx context.Context, path string, q url.Values, accept string) ([]byte, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.do(ctx, path, q, accept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Server: c.Server(), Err: err}
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", path, maxBody)
	}
	return body, nil
}

// Get decodes the JSON answer of a GET of path (e.g. "/api/v1/tenants/a",
// see the *Path functions) into out; a *json.RawMessage keeps it as sent.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	body, err := c.getBody(ctx, path, nil, "application/json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", path, err)
	}
	return nil
}

// ListOptions selects the items of a list.
type ListOptions struct {
	// LabelSelector filters by labels, as the API's labelSelector
	// parameter: "a=b,c!=d,e in (f,g),!h".
	LabelSelector string
	// Offset skips that many matching items.
	Offset int
	// Limit caps the number of items. Zero fetches every matching item,
	// page by page.
	Limit int
}

// List fetches the list at path (a collection such as "/api/v1/tenants")
// as the server sent its items. With opts.Limit zero it follows the pages
// until it has every item; Total is the server's count of matching items.
func (c *Client) List(ctx context.Context, path string, opts ListOptions) (api.List[json.RawMessage], error) {
	out := api.List[json.RawMessage]{Items: []json.RawMessage{}}
	offset := opts.Offset
	for {
		page := c.page
		if opts.Limit > 0 {
			page = min(opts.Limit-len(out.Items), c.page)
		}
		q := url.Values{"limit": {strconv.Itoa(page)}}
		if offset > 0 {
			q.Set("offset", strconv.Itoa(offset))
		}
		if opts.LabelSelector != "" {
			q.Set("labelSelector", opts.LabelSelector)
		}
		body, err := c.getBody(ctx, path, q, "application/json")
		if err != nil {
			return out, err
		}
		var l api.List[json.RawMessage]
		if err := json.Unmarshal(body, &l); err != nil {
			return out, fmt.Errorf("GET %s: decode list: %w", path, err)
		}
		out.Items = append(out.Items, l.Items...)
		out.Total = l.Total
		offset += len(l.Items)
		if len(l.Items) == 0 || offset >= l.Total || (opts.Limit > 0 && len(out.Items) >= opts.Limit) {
			return out, nil
		}
	}
}

// decodeItems decodes the items of a raw list into T.
func decodeItems[T any](path string, l api.List[json.RawMessage]) ([]T, error) {
	out := make([]T, len(l.Items))
	for i, raw := range l.Items {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("GET %s: decode item %d: %w", path, i, err)
		}
	}
	return out, nil
}

// listOf fetches the list at path and decodes its items into T.
func listOf[T any](ctx context.Context, c *Client, path string, opts ListOptions) ([]T, error) {
	l, err := c.List(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	return decodeItems[T](path, l)
}

// getOf fetches the object at path and decodes it into a T.
func getOf[T any](ctx context.Context, c *Client, path string) (*T, error) {
	var v T
	if err := c.Get(ctx, path, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// GetBytes returns the body of a GET of path as it is, for answers that
// are not JSON, such as a kubeconfig.
func (c *Client) GetBytes(ctx context.Context, path string) ([]byte, error) {
	return c.getBody(ctx, path, nil, "")
}
