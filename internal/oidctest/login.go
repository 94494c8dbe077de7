package oidctest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
)

// Login signs username in as a browser would, without one: it follows
// authURL (the authorization request a relying party redirected to) to the
// provider's login form, posts the username and password, and follows the
// provider's redirects until they leave the provider. It returns that last
// redirect, to the client's redirect URI with code and state, without
// following it. A wrong password is an error that says what the form said.
func (p *Provider) Login(ctx context.Context, authURL, username, password string) (*url.URL, error) {
	c := p.browser()
	resp, err := get(ctx, c, authURL)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if to, ok := p.leaving(resp); ok {
		return to, nil // the provider still knew the user
	}
	m := hiddenID.FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		return nil, fmt.Errorf("oidctest: %s answered %s, not the login form: %.300s", authURL, resp.Status, body)
	}
	form := url.Values{"id": {string(m[1])}, "username": {username}, "password": {password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"/login/username", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err = c.Do(req); err != nil {
		return nil, err
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if to, ok := p.leaving(resp); ok {
		return to, nil
	}
	if m := formError.FindSubmatch(body); m != nil {
		return nil, fmt.Errorf("oidctest: the provider refused %s: %s", username, strings.TrimSpace(string(m[1])))
	}
	return nil, fmt.Errorf("oidctest: the login of %s ended at %s: %.300s", username, resp.Status, body)
}

// ApproveDevice approves the device code userCode as username would at
// the provider's device page (the verification URI).
func (p *Provider) ApproveDevice(ctx context.Context, userCode, username, password string) error {
	c := p.browser()
	form := url.Values{"user_code": {userCode}, "username": {username}, "password": {password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"/device/login", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "action") {
		return fmt.Errorf("oidctest: the device login of %s answered %s: %.300s", username, resp.Status, body)
	}
	resp, err = get(ctx, c, p.Issuer+"/device/confirm?action=allowed")
	if err != nil {
		return err
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "Device authorization allowed") {
		return fmt.Errorf("oidctest: approving %s answered %s: %.300s", userCode, resp.Status, body)
	}
	return nil
}

var (
	hiddenID  = regexp.MustCompile(`name="id" value="([^"]+)"`)
	formError = regexp.MustCompile(`(?s)<p style="color:red; min-height: 1rem;">(.*?)</p>`)
)

// browser is an HTTP client with cookies that follows redirects within
// the provider and stops at the first that leaves it.
func (p *Provider) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if !strings.HasPrefix(req.URL.String(), p.Issuer+"/") || len(via) > 10 {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// leaving returns where resp redirects when that is outside the provider.
func (p *Provider) leaving(resp *http.Response) (*url.URL, bool) {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return nil, false
	}
	to, err := resp.Location()
	return to, err == nil && !strings.HasPrefix(to.String(), p.Issuer+"/")
}

func get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
