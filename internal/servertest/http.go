package servertest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Request sends method to path with body and headers and returns the
// status code and the body. A request that gets no answer fails the test.
func (s *Server) Request(method, path string, body []byte, header http.Header) (int, []byte) {
	s.tb.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		s.tb.Fatalf("%s %s: %v", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.tb.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// Get fetches path; with status 200 it decodes the JSON body into v (when
// not nil). It returns the status code.
func (s *Server) Get(path string, v any) int {
	s.tb.Helper()
	code, b := s.Request(http.MethodGet, path, nil, nil)
	if code == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			s.tb.Fatalf("GET %s: decode %T: %v\n%s", path, v, err, b)
		}
	}
	return code
}

// WaitFor polls cond until it holds. It fails the test when the server
// exits meanwhile, or after WaitTimeout, saying what it waited for.
func (s *Server) WaitFor(what string, cond func() bool) {
	s.tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if !s.Running() {
			s.tb.Fatalf("rezuscloud serve exited while waiting for %s:\n%s", what, s.Tail(50))
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("timed out after %v waiting for %s; /api/v1/status: %s", WaitTimeout, what, s.rawStatus())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitMoving polls cond until it holds, as WaitFor does, but fails only
// after WaitTimeout without progress: progress returns a count that grows
// while the awaited work goes on (tofu runs, applied tenants). A wait for
// a fleet's work, which takes as long as the fleet is large on the
// machine at hand, then fails when the work stalls, not when it is slow.
func (s *Server) WaitMoving(what string, progress func() int64, cond func() bool) {
	s.tb.Helper()
	last, deadline := progress(), time.Now().Add(WaitTimeout)
	for !cond() {
		if !s.Running() {
			s.tb.Fatalf("rezuscloud serve exited while waiting for %s:\n%s", what, s.Tail(50))
		}
		if p := progress(); p > last {
			last, deadline = p, time.Now().Add(WaitTimeout)
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("no progress in %v waiting for %s; /api/v1/status: %s", WaitTimeout, what, s.rawStatus())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawStatus is the body of /api/v1/status, or why there is none.
func (s *Server) rawStatus() string {
	resp, err := http.Get(s.url + "/api/v1/status")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// Commit returns the Commit of revision sha, and whether the API has it.
func (s *Server) Commit(sha string) (schema.Commit, bool) {
	s.tb.Helper()
	var c schema.Commit
	switch code := s.Get("/api/v1/commits/"+schema.CommitName(sha), &c); code {
	case http.StatusOK:
		return c, true
	case http.StatusNotFound:
		return c, false
	default:
		s.tb.Fatalf("GET /api/v1/commits/%s: %d", schema.CommitName(sha), code)
		return c, false
	}
}

// WaitCommit waits until the Commit of revision sha has a final phase, and
// returns it.
func (s *Server) WaitCommit(sha string) schema.Commit {
	s.tb.Helper()
	var c schema.Commit
	s.WaitFor("commit "+shortSHA(sha)+" to finish", func() bool {
		var ok bool
		c, ok = s.Commit(sha)
		return ok && c.Status.Phase.Done()
	})
	return c
}

func shortSHA(sha string) string { return sha[:min(12, len(sha))] }
