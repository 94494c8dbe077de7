package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// hbMethods are the methods every route is tried with: the ones the server
// serves somewhere, and some it serves nowhere.
var hbMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "LOCK", "UNLOCK", "PROPFIND", "BREW"}

// TestHardeningMethods walks every route of the real server with every
// method, as an admin. A method the route serves gets its answer, whatever
// it is (a 404 for a tenant that does not exist is fine); every other
// method gets 405, an Allow header that names exactly the served methods,
// and the API's JSON error body.
func TestHardeningMethods(t *testing.T) {
	s := hbStart(t)
	get := []string{"GET", "HEAD"}
	state := []string{"GET", "POST", "DELETE", "LOCK", "UNLOCK"}
	routes := []struct {
		path  string
		allow []string
	}{
		{"/healthz", get},
		{"/readyz", get},
		{"/version", get},
		{"/metrics", get},
		{"/api/v1/tenants/production/kubeconfig", get},
		{"/api/v1/tenants/production/talosconfig", get},
		{"/api/v1/tenants/production/machines/m-1/config", get},
		{"/api/v1/tenants/production/rendered", get},
		{"/api/v1/previews", []string{"POST"}},
		{"/hooks/github", []string{"POST"}},
		{"/hooks/gitlab", []string{"POST"}},
		{"/hooks/generic", []string{"POST"}},
		{"/tfstate/production", state},
		{"/api/v1/tfstate/production/versions", []string{"GET"}},
		{"/api/v1/status", get},
		{"/api/v1/tenants", get},
		{"/api/v1/tenants/production", get},
		{"/api/v1/tenants/production/events", get},
		{"/api/v1/tenants/production/node-groups", get},
		{"/api/v1/tenants/production/node-groups/workers", get},
		{"/api/v1/tenants/production/node-groups/workers/events", get},
		{"/api/v1/tenants/production/patches", get},
		{"/api/v1/tenants/production/patches/ntp", get},
		{"/api/v1/tenants/production/machines", get},
		{"/api/v1/tenants/production/machines/m-1", get},
		{"/api/v1/machines", get},
		{"/api/v1/machines/m-1", get},
		{"/api/v1/machines/events", get},
		{"/api/v1/providers", get},
		{"/api/v1/providers/sim", get},
		{"/api/v1/providers/sim/events", get},
		{"/api/v1/commits", get},
		{"/api/v1/commits/0123456789abcdef", get},
		{"/api/v1/commits/events", get},
	}
	for _, rt := range routes {
		allow := slices.Clone(rt.allow)
		slices.Sort(allow)
		for _, m := range hbMethods {
			path := rt.path
			if strings.HasSuffix(path, "/events") || strings.HasSuffix(path, "/tenants/production") && m == "GET" {
				// A watch would stream: ask for a list that ends.
				path += "?limit=1"
			}
			req, err := http.NewRequest(m, s.URL()+path, bytes.NewReader(nil))
			if err != nil {
				t.Fatal(err)
			}
			req.SetBasicAuth("ops", s.secrets["ops"])
			if strings.HasSuffix(rt.path, "/events") && m == "GET" {
				continue // a watch; its GET is served, as TestRoles shows
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := m + " " + rt.path
			if slices.Contains(allow, m) {
				if resp.StatusCode == http.StatusMethodNotAllowed {
					t.Errorf("%s: 405, but the route serves %s: %s", what, m, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s: %d, want 405: %.200s", what, resp.StatusCode, body)
				continue
			}
			got := strings.Split(resp.Header.Get("Allow"), ", ")
			slices.Sort(got)
			if !slices.Equal(got, allow) {
				t.Errorf("%s: Allow %q, want %q", what, resp.Header.Get("Allow"), strings.Join(allow, ", "))
			}
			if m == "HEAD" {
				continue // no body
			}
			var ae rolesAPIError
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" || json.Unmarshal(body, &ae) != nil ||
				ae.Reason != "MethodNotAllowed" || ae.Code != 405 || ae.Message == "" {
				t.Errorf("%s: 405 body %q (%s), want the API's MethodNotAllowed error", what, body, ct)
			}
		}
	}
}

// TestHardeningErrorEcho sends inputs of hundreds of kilobytes where the
// server quotes what it was given in its error: query parameters, names in
// paths, selectors of lists and watches. Every error body stays a few
// hundred bytes, and still says what was wrong.
func TestHardeningErrorEcho(t *testing.T) {
	s := hbStart(t)
	huge := strings.Repeat("a", 400_000)
	cases := []struct {
		what, path, method string
		want               int
		says               string
	}{
		{"labelSelector of a list", "/api/v1/machines?labelSelector=" + url.QueryEscape("x in "+huge), "GET", 400, "labelSelector"},
		{"labelSelector of a watch", "/api/v1/machines?watch=true&labelSelector=" + url.QueryEscape(huge+"=="), "GET", 400, "labelSelector"},
		{"offset", "/api/v1/tenants?offset=" + huge, "GET", 400, "offset"},
		{"limit", "/api/v1/tenants?limit=" + huge, "GET", 400, "limit"},
		{"resourceVersion", "/api/v1/machines?watch=true&resourceVersion=" + huge, "GET", 400, "resourceVersion"},
		{"tenant name", "/api/v1/tenants/" + huge, "GET", 404, "not found"},
		{"commit", "/api/v1/commits/" + huge, "GET", 404, "not found"},
		{"no such path", "/api/v1/" + huge, "GET", 404, "no such resource"},
		{"state name", "/tfstate/" + huge, "GET", 400, "DNS-1123"},
		{"versions of a state name", "/api/v1/tfstate/" + huge + "/versions", "GET", 400, "DNS-1123"},
		{"a write to the read-only API", "/api/v1/tenants/" + huge, "PUT", 405, "read-only"},
		{"webhook path", "/hooks/" + huge, "POST", 404, "no webhook"},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, s.URL()+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("ops", s.secrets["ops"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ae rolesAPIError
		if resp.StatusCode != c.want || json.Unmarshal(body, &ae) != nil || !strings.Contains(ae.Message, c.says) {
			t.Errorf("%s: %d %.300s, want %d saying %q", c.what, resp.StatusCode, body, c.want, c.says)
		}
		if len(body) > 1500 {
			t.Errorf("%s: the %d answer has %d bytes: it echoes the request", c.what, resp.StatusCode, len(body))
		}
	}
}
