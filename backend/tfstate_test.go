package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

func stateJSON(serial int, lineage string, extra string) []byte {
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.10.10","serial":%d,"lineage":%q,"outputs":{},"resources":[%s]}`, serial, lineage, extra)
}

func lockJSON(id, who string) []byte {
	return fmt.Appendf(nil, `{"ID":%q,"Operation":"OperationTypeApply","Info":"","Who":%q,"Version":"1.10.10","Created":"2026-01-02T03:04:05Z","Path":""}`, id, who)
}

func wantCode(t *testing.T, what string, got int, body []byte, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %d, want %d; body: %s", what, got, want, body)
	}
}

// wantAPIError checks that body is the API error shape with code and
// reason, and that its message contains each of contains.
func wantAPIError(t *testing.T, body []byte, code int, reason api.Reason, contains ...string) {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body is not an API error: %v: %s", err, body)
	}
	if e.Status != "failure" || e.Code != code || e.Reason != reason {
		t.Fatalf("error = %+v, want code %d reason %s", e, code, reason)
	}
	for _, c := range contains {
		if !strings.Contains(e.Message, c) {
			t.Errorf("error message %q does not mention %q", e.Message, c)
		}
	}
}

func wantHolder(t *testing.T, body []byte, id, token string) {
	t.Helper()
	var li struct{ ID, Who string }
	if err := json.Unmarshal(body, &li); err != nil {
		t.Fatalf("423 body is not a LockInfo: %v: %s", err, body)
	}
	if li.ID != id || !strings.Contains(li.Who, "token "+token) {
		t.Fatalf("holder = %+v, want ID %s and Who naming token %s", li, id, token)
	}
}

func TestStateGet(t *testing.T) {
	ts := startServer(t, Config{}, true)
	code, body := ts.do(t, req{method: "GET", path: "/tfstate/t1", token: "editor"})
	wantCode(t, "GET of no state", code, body, http.StatusNoContent)
	if len(body) != 0 {
		t.Fatalf("204 with body %q", body)
	}

	state := stateJSON(1, "lin-1", "")
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/t1", token: "editor", body: state, md5: true})
	wantCode(t, "POST", code, body, http.StatusOK)

	resp := ts.doResp(t, req{method: "GET", path: "/tfstate/t1", token: "editor"})
	got := new(bytes.Buffer)
	got.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got.Bytes(), state) {
		t.Fatalf("GET = %d %q, want 200 %q", resp.StatusCode, got, state)
	}
	if resp.Header.Get("Content-MD5") == "" {
		t.Error("GET of a state posted with Content-MD5 does not send it back")
	}

	code, body = ts.do(t, req{method: "GET", path: "/tfstate/t1"})
	wantCode(t, "GET without credentials", code, body, http.StatusUnauthorized)
	wantAPIError(t, body, http.StatusUnauthorized, api.ReasonUnauthorized)

	code, body = ts.do(t, req{method: "GET", path: "/tfstate/t1", bearer: ts.tokens["admin"]})
	wantCode(t, "GET with bearer token", code, body, http.StatusOK)

	// The view role sees the metadata of a state, never its bytes.
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/t1", token: "viewer"})
	wantCode(t, "GET as view", code, body, http.StatusForbidden)
	wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, "viewer", "needs edit")
	if bytes.Contains(body, []byte("lin-1")) {
		t.Errorf("the 403 to a viewer holds state content: %s", body)
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/t1/versions", token: "viewer"})
	wantCode(t, "versions as view", code, body, http.StatusOK)
	var list api.StateVersionList
	if err := json.Unmarshal(body, &list); err != nil || list.Total != 1 || list.Items[0].Lineage != "lin-1" || *list.Items[0].Serial != 1 {
		t.Fatalf("versions as view = %s (%v)", body, err)
	}

	code, body = ts.do(t, req{method: "GET", path: "/tfstate/NotALabel", token: "editor"})
	wantCode(t, "GET of a bad name", code, body, http.StatusBadRequest)
	wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, "DNS-1123")

	for _, p := range []string{"/tfstate/", "/tfstate/a/b", "/tfstate/-a", "/tfstate/a_b", "/tfstate/" + strings.Repeat("a", 64)} {
		code, body = ts.do(t, req{method: "GET", path: p, token: "editor"})
		wantCode(t, "GET "+p, code, body, http.StatusBadRequest)
	}

	code, body = ts.do(t, req{method: "PUT", path: "/tfstate/t1", token: "editor", body: state})
	wantCode(t, "PUT", code, body, http.StatusMethodNotAllowed)
	wantAPIError(t, body, http.StatusMethodNotAllowed, api.ReasonMethodNotAllowed)
}

func TestStateAuth(t *testing.T) {
	ts := startServer(t, Config{}, true)
	resp := ts.doResp(t, req{method: "GET", path: "/tfstate/t1"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Header.Values("WWW-Authenticate")) == 0 {
		t.Fatalf("no credentials: %d with WWW-Authenticate %q, want 401 with the header", resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
	}
	hr, _ := http.NewRequest("GET", ts.URL()+"/tfstate/t1", nil)
	hr.SetBasicAuth("editor", ts.tokens["admin"])
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin's token under the editor's name: %d, want 401", resp.StatusCode)
	}
	for _, c := range []req{
		{method: "GET", path: "/tfstate/t1", bearer: "rzc_wrong"},
		{method: "GET", path: "/tfstate/t1", header: map[string]string{"Authorization": "Token abc"}},
		{method: "POST", path: "/tfstate/t1", body: stateJSON(1, "l", "")},
	} {
		code, body := ts.do(t, c)
		wantCode(t, fmt.Sprintf("%+v", c), code, body, http.StatusUnauthorized)
	}
	for _, c := range []struct {
		r    req
		want int
	}{
		{req{method: "POST", path: "/tfstate/t1", token: "viewer", body: stateJSON(1, "l", "")}, http.StatusForbidden},
		{req{method: "LOCK", path: "/tfstate/t1", token: "viewer", body: lockJSON("a", "w")}, http.StatusForbidden},
		{req{method: "DELETE", path: "/tfstate/t1", token: "viewer"}, http.StatusForbidden},
		{req{method: "GET", path: "/tfstate/t1", token: "viewer"}, http.StatusForbidden},
		{req{method: "GET", path: "/tfstate/t1?version=1", token: "editor"}, http.StatusForbidden},
		{req{method: "GET", path: "/tfstate/t1?version=1", token: "viewer"}, http.StatusForbidden},
	} {
		code, body := ts.do(t, c.r)
		wantCode(t, c.r.method+" "+c.r.path+" as "+c.r.token, code, body, c.want)
		wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, c.r.token)
	}

	// Secrets never reach the log; token names do.
	logs := ts.logs.String()
	for name, secret := range ts.tokens {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log contains the secret of token %s", name)
		}
	}
	if !strings.Contains(logs, "token=viewer") || !strings.Contains(logs, "status=403") {
		t.Errorf("request log lacks token name or status:\n%s", logs)
	}
}

func TestStatePost(t *testing.T) {
	ts := startServer(t, Config{MaxStateBytes: 4096}, true)
	post := func(body []byte, query string, md5 bool) (int, []byte) {
		return ts.do(t, req{method: "POST", path: "/tfstate/t1" + query, token: "editor", body: body, md5: md5})
	}
	code, body := post(stateJSON(3, "lin-a", ""), "", true)
	wantCode(t, "first POST", code, body, http.StatusOK)

	code, body = post(stateJSON(4, "lin-a", ""), "", false)
	wantCode(t, "POST without Content-MD5", code, body, http.StatusOK)

	code, body = ts.do(t, req{method: "POST", path: "/tfstate/t1", token: "editor", body: stateJSON(5, "lin-a", ""),
		header: map[string]string{"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}})
	wantCode(t, "POST with a wrong Content-MD5", code, body, http.StatusBadRequest)
	wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, "Content-MD5")

	code, body = ts.do(t, req{method: "POST", path: "/tfstate/t1", token: "editor", body: stateJSON(5, "lin-a", ""),
		header: map[string]string{"Content-MD5": "not base64!"}})
	wantCode(t, "POST with a malformed Content-MD5", code, body, http.StatusBadRequest)

	code, body = post(stateJSON(5, "lin-b", ""), "", true)
	wantCode(t, "POST of another lineage", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "lineage lin-a", "lin-b")

	code, body = post(stateJSON(3, "lin-a", ""), "", true)
	wantCode(t, "POST of an older serial", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "serial 4", "serial 3")

	code, body = post(stateJSON(4, "lin-a", `{"same":"serial"}`), "", true)
	wantCode(t, "POST of the same serial", code, body, http.StatusOK)

	big := stateJSON(5, "lin-a", `"`+strings.Repeat("x", 5000)+`"`)
	code, body = post(big, "", true)
	wantCode(t, "POST over the limit", code, body, http.StatusRequestEntityTooLarge)
	// Without Content-Length the limit still holds.
	hr, _ := http.NewRequest("POST", ts.URL()+"/tfstate/t1", struct{ *bytes.Reader }{bytes.NewReader(big)})
	hr.SetBasicAuth("editor", ts.tokens["editor"])
	hr.ContentLength = -1
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked POST over the limit: %d, want 413", resp.StatusCode)
	}

	code, body = post(nil, "", false)
	wantCode(t, "empty POST", code, body, http.StatusBadRequest)

	code, body = post(stateJSON(9, "lin-a", ""), "?ID=no-such-lock", true)
	wantCode(t, "POST with the ID of a lock not held", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "not locked")

	// Nothing refused was stored.
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/t1", token: "editor"})
	wantCode(t, "GET", code, body, http.StatusOK)
	if want := stateJSON(4, "lin-a", `{"same":"serial"}`); !bytes.Equal(body, want) {
		t.Fatalf("state = %s, want %s", body, want)
	}
}

func TestStatePostEncryptedAndOpaque(t *testing.T) {
	ts := startServer(t, Config{}, true)
	enc := func(serial int, lineage string) []byte {
		return fmt.Appendf(nil, `{"serial":%d,"lineage":%q,"meta":{"key_provider.pbkdf2.k":"eyJzYWx0Ijo="},"encrypted_data":"c2VjcmV0IGJ5dGVz","encryption_version":"v0"}`, serial, lineage)
	}
	code, body := ts.do(t, req{method: "POST", path: "/tfstate/enc", token: "editor", body: enc(2, "lin-e"), md5: true})
	wantCode(t, "POST encrypted", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/enc", token: "editor", body: enc(1, "lin-e"), md5: true})
	wantCode(t, "POST encrypted with an older serial", code, body, http.StatusConflict)
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/enc", token: "editor", body: enc(3, "lin-x"), md5: true})
	wantCode(t, "POST encrypted with another lineage", code, body, http.StatusConflict)
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/enc", token: "editor"})
	if code != http.StatusOK || !bytes.Equal(body, enc(2, "lin-e")) {
		t.Fatalf("GET encrypted = %d %s", code, body)
	}

	// Anything but a state is refused with a reason, and changes nothing.
	for _, c := range []struct {
		name, body, why string
	}{
		{"binary", "\x00\xff{\x80\n\x01", "not JSON"},
		{"text", "hello", "not JSON"},
		{"truncated", `{"version":4,"serial":1,"lineage":"lin-e"`, "not valid JSON"},
		{"trailing bytes", `{"version":4,"serial":3,"lineage":"lin-e"} x`, "not valid JSON"},
		{"array", `[{"version":4,"serial":3,"lineage":"lin-e"}]`, "not an object"},
		{"null", `null`, "not an object"},
		{"object without anything", `{}`, "no version"},
		{"no serial", `{"version":4,"lineage":"lin-e"}`, "no serial"},
		{"negative serial", `{"version":4,"serial":-1,"lineage":"lin-e"}`, "serial -1 is not a whole number"},
		{"serial as a string", `{"version":4,"serial":"3","lineage":"lin-e"}`, "not a whole number"},
		{"fractional version", `{"version":4.5,"serial":3,"lineage":"lin-e"}`, "version 4.5"},
		{"no lineage", `{"version":4,"serial":3}`, "lineage"},
		{"empty lineage", `{"version":4,"serial":3,"lineage":""}`, "lineage"},
		{"lineage as a number", `{"version":4,"serial":3,"lineage":7}`, "lineage"},
		{"envelope without lineage", `{"serial":3,"encrypted_data":"eA==","encryption_version":"v0"}`, "lineage"},
		{"envelope without serial", `{"lineage":"lin-e","encrypted_data":"eA==","encryption_version":"v0"}`, "no serial"},
		{"envelope without data", `{"serial":3,"lineage":"lin-e","encryption_version":"v0"}`, "encrypted_data"},
		{"envelope with an empty version", `{"serial":3,"lineage":"lin-e","encrypted_data":"eA==","encryption_version":""}`, "encryption_version"},
	} {
		code, body = ts.do(t, req{method: "POST", path: "/tfstate/enc", token: "editor", body: []byte(c.body), md5: true})
		wantCode(t, "POST of "+c.name, code, body, http.StatusBadRequest)
		wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, "not a TF state, nothing stored", c.why)
		code, body = ts.do(t, req{method: "POST", path: "/tfstate/new-" + strings.ReplaceAll(c.name, " ", "-"), token: "admin", body: []byte(c.body)})
		wantCode(t, "POST of "+c.name+" to a new state as admin", code, body, http.StatusBadRequest)
	}
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/enc", token: "editor"})
	if code != http.StatusOK || !bytes.Equal(body, enc(2, "lin-e")) {
		t.Fatalf("GET after refused POSTs = %d %s", code, body)
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/enc/versions", token: "viewer"})
	if code != http.StatusOK || !strings.Contains(string(body), `"total":1`) {
		t.Fatalf("versions after refused POSTs = %d %s", code, body)
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/new-binary/versions", token: "viewer"})
	wantCode(t, "versions of a state whose only POST was refused", code, body, http.StatusNotFound)
}

// TestStateGuardsOverGarbage stores what an older server accepted without
// checking, bytes that are not a state, and checks that the guards still
// hold: the lineage of the last real state keeps foreign lineages out and
// lets its own writer back in, and a state that never had a lineage takes
// a POST only from an admin or after DELETE.
func TestStateGuardsOverGarbage(t *testing.T) {
	ts := startServer(t, Config{}, true)
	post := func(name, token string, body []byte) (int, []byte) {
		return ts.do(t, req{method: "POST", path: "/tfstate/" + name, token: token, body: body})
	}
	garbage := func(name string) {
		t.Helper()
		err := ts.Store().Update(func(tx store.Tx) error {
			_, err := tx.PutState(name, []byte("not a state\x00"), store.StateMeta{Size: 12, Token: "old-server"}, 10)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	code, body := post("g", "editor", stateJSON(5, "lin-real", ""))
	wantCode(t, "first POST", code, body, http.StatusOK)
	garbage("g")
	code, body = post("g", "editor", stateJSON(9, "lin-foreign", ""))
	wantCode(t, "POST of a foreign lineage over garbage", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "lineage lin-real", "lin-foreign")
	code, body = post("g", "admin", stateJSON(9, "lin-foreign", ""))
	wantCode(t, "POST of a foreign lineage over garbage, as admin", code, body, http.StatusConflict)
	code, body = post("g", "editor", stateJSON(4, "lin-real", ""))
	wantCode(t, "POST of an older serial over garbage", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "serial 5", "serial 4")
	code, body = post("g", "editor", stateJSON(6, "lin-real", ""))
	wantCode(t, "POST of the real lineage over garbage", code, body, http.StatusOK)

	// Only garbage was ever stored: the lineage is unknown.
	garbage("u")
	code, body = post("u", "editor", stateJSON(1, "lin-any", ""))
	wantCode(t, "POST over garbage of unknown lineage", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "lineage is unknown", "admin", "DELETE")
	code, body = post("u", "admin", stateJSON(1, "lin-any", ""))
	wantCode(t, "POST over garbage of unknown lineage, as admin", code, body, http.StatusOK)
	garbage("d")
	code, body = ts.do(t, req{method: "DELETE", path: "/tfstate/d", token: "editor"})
	wantCode(t, "DELETE of garbage", code, body, http.StatusOK)
	code, body = post("d", "editor", stateJSON(1, "lin-any", ""))
	wantCode(t, "POST after DELETE of garbage", code, body, http.StatusOK)
}

func TestStateLockUnlock(t *testing.T) {
	ts := startServer(t, Config{}, true)
	do := func(method, token string, body []byte, query string) (int, []byte) {
		return ts.do(t, req{method: method, path: "/tfstate/t1" + query, token: token, body: body, md5: body != nil})
	}
	code, body := do("LOCK", "editor", lockJSON("lock-1", "alice@host"), "")
	wantCode(t, "LOCK", code, body, http.StatusOK)
	code, body = do("LOCK", "editor", lockJSON("lock-1", "alice@host"), "")
	wantCode(t, "LOCK again with the same ID and token", code, body, http.StatusOK)

	code, body = do("LOCK", "editor2", lockJSON("lock-2", "bob@host"), "")
	wantCode(t, "LOCK of a held lock", code, body, http.StatusLocked)
	wantHolder(t, body, "lock-1", "editor")
	if !strings.Contains(string(body), "alice@host") {
		t.Errorf("holder info lost the holder's Who: %s", body)
	}

	code, body = ts.do(t, req{method: "LOCK", path: "/tfstate/t1", token: "editor2", body: lockJSON("lock-2", "bob@host"),
		header: map[string]string{"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}})
	wantCode(t, "LOCK with a wrong Content-MD5", code, body, http.StatusBadRequest)

	for _, bad := range [][]byte{nil, []byte("{"), []byte(`{"ID":""}`), []byte(`[1]`)} {
		code, body = do("LOCK", "editor2", bad, "")
		wantCode(t, fmt.Sprintf("LOCK with body %q", bad), code, body, http.StatusBadRequest)
	}

	// While locked, POST needs the holder's ID and token.
	code, body = do("POST", "editor", stateJSON(1, "l", ""), "")
	wantCode(t, "POST without ID while locked", code, body, http.StatusLocked)
	wantHolder(t, body, "lock-1", "editor")
	code, body = do("POST", "editor", stateJSON(1, "l", ""), "?ID=lock-2")
	wantCode(t, "POST with the wrong ID", code, body, http.StatusLocked)
	code, body = do("POST", "editor2", stateJSON(1, "l", ""), "?ID=lock-1")
	wantCode(t, "POST with the holder's ID from another token", code, body, http.StatusLocked)
	code, body = do("POST", "editor", stateJSON(1, "l", ""), "?ID=lock-1")
	wantCode(t, "POST by the holder", code, body, http.StatusOK)

	code, body = do("DELETE", "editor2", nil, "")
	wantCode(t, "DELETE while locked by another token", code, body, http.StatusLocked)
	wantHolder(t, body, "lock-1", "editor")

	code, body = do("UNLOCK", "editor", lockJSON("lock-2", "alice@host"), "")
	wantCode(t, "UNLOCK with the wrong ID", code, body, http.StatusLocked)
	wantHolder(t, body, "lock-1", "editor")

	code, body = do("UNLOCK", "editor2", lockJSON("lock-1", "bob@host"), "")
	wantCode(t, "UNLOCK of another token's lock by an edit token", code, body, http.StatusForbidden)
	wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, "force-unlock", "admin")

	code, body = do("UNLOCK", "editor", lockJSON("lock-1", "alice@host"), "")
	wantCode(t, "UNLOCK by the holder", code, body, http.StatusOK)
	code, body = do("UNLOCK", "editor", lockJSON("lock-1", "alice@host"), "")
	wantCode(t, "UNLOCK of an unlocked state", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "not locked")

	code, body = do("DELETE", "editor2", nil, "")
	wantCode(t, "DELETE", code, body, http.StatusOK)
	code, body = do("DELETE", "editor2", nil, "")
	wantCode(t, "DELETE of no state", code, body, http.StatusNotFound)
	code, body = do("GET", "editor", nil, "")
	wantCode(t, "GET after DELETE", code, body, http.StatusNoContent)
}

func TestStateForceUnlock(t *testing.T) {
	ts := startServer(t, Config{}, true)
	lock := func(id string) {
		code, body := ts.do(t, req{method: "LOCK", path: "/tfstate/t1", token: "editor", body: lockJSON(id, "alice@host")})
		wantCode(t, "LOCK "+id, code, body, http.StatusOK)
	}
	// OpenTofu's force-unlock: a LockInfo with only the ID set.
	onlyID := func(id string) []byte {
		return fmt.Appendf(nil, `{"ID":%q,"Operation":"","Info":"","Who":"","Version":"","Created":"0001-01-01T00:00:00Z","Path":""}`, id)
	}
	lock("l1")
	code, body := ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "editor2", body: onlyID("l1")})
	wantCode(t, "OpenTofu force-unlock by an edit token", code, body, http.StatusForbidden)
	code, body = ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "admin", body: onlyID("l9")})
	wantCode(t, "admin force-unlock with the wrong ID", code, body, http.StatusLocked)
	code, body = ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "admin", body: onlyID("l1")})
	wantCode(t, "OpenTofu force-unlock by admin", code, body, http.StatusOK)

	// Terraform's force-unlock: an empty body, whatever ID was given. Not
	// even the token that holds the lock may release it without the ID.
	lock("l2")
	code, body = ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "editor2"})
	wantCode(t, "Terraform force-unlock by an edit token", code, body, http.StatusForbidden)
	code, body = ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "editor"})
	wantCode(t, "Terraform force-unlock by the holder's token", code, body, http.StatusForbidden)
	wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, "without the lock ID", "admin")
	code, body = ts.do(t, req{method: "UNLOCK", path: "/tfstate/t1", token: "admin"})
	wantCode(t, "Terraform force-unlock by admin", code, body, http.StatusOK)

	code, body = ts.do(t, req{method: "LOCK", path: "/tfstate/t1", token: "editor2", body: lockJSON("l3", "bob@host")})
	wantCode(t, "LOCK after force-unlock", code, body, http.StatusOK)
	if logs := ts.logs.String(); strings.Count(logs, `msg="state force-unlocked"`) != 2 || !strings.Contains(logs, "by=admin") {
		t.Errorf("force-unlocks are not logged:\n%s", logs)
	}

	// The writer whose lock was broken cannot write any more.
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/t1?ID=l2", token: "editor", body: stateJSON(1, "l", "")})
	wantCode(t, "POST under a broken lock", code, body, http.StatusLocked)
	wantHolder(t, body, "l3", "editor2")
}

func TestStateHistory(t *testing.T) {
	ts := startServer(t, Config{StateHistory: 3}, true)
	for serial := 1; serial <= 6; serial++ {
		code, body := ts.do(t, req{method: "POST", path: "/tfstate/h", token: "editor", body: stateJSON(serial, "lin-h", ""), md5: true})
		wantCode(t, "POST", code, body, http.StatusOK)
	}
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tfstate/h/versions", token: "admin"})
	wantCode(t, "versions", code, body, http.StatusOK)
	var list api.StateVersionList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range list.Items {
		got = append(got, fmt.Sprintf("v%d serial=%d current=%v size=%d token=%s", v.Version, *v.Serial, v.Current, v.Size, v.Token))
		if v.Time.IsZero() || v.Lineage != "lin-h" || v.MD5 == "" {
			t.Errorf("version %d lacks time, lineage or md5: %+v", v.Version, v)
		}
	}
	size := len(stateJSON(1, "lin-h", ""))
	want := []string{
		fmt.Sprintf("v6 serial=6 current=true size=%d token=editor", size),
		fmt.Sprintf("v5 serial=5 current=false size=%d token=editor", size),
		fmt.Sprintf("v4 serial=4 current=false size=%d token=editor", size),
		fmt.Sprintf("v3 serial=3 current=false size=%d token=editor", size),
	}
	if diff := cmp.Diff(want, got); diff != "" || list.Total != 4 || list.Lock != nil {
		t.Fatalf("versions (-want +got):\n%s\ntotal %d lock %+v", diff, list.Total, list.Lock)
	}

	code, body = ts.do(t, req{method: "GET", path: "/tfstate/h?version=4", token: "admin"})
	if code != http.StatusOK || !bytes.Equal(body, stateJSON(4, "lin-h", "")) {
		t.Fatalf("GET version 4 = %d %s", code, body)
	}
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/h?version=2", token: "admin"})
	wantCode(t, "GET of a dropped version", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, "no version 2")
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/h?version=x", token: "admin"})
	wantCode(t, "GET of version x", code, body, http.StatusBadRequest)

	// DELETE keeps the history; the next POST starts a new lineage.
	code, body = ts.do(t, req{method: "DELETE", path: "/tfstate/h", token: "editor"})
	wantCode(t, "DELETE", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "GET", path: "/tfstate/h?version=6", token: "admin"})
	wantCode(t, "GET of the deleted version", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/h", token: "editor", body: stateJSON(1, "lin-new", "")})
	wantCode(t, "POST of a new lineage after DELETE", code, body, http.StatusOK)

	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/nothing/versions", token: "admin"})
	wantCode(t, "versions of no state", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound)
	code, body = ts.do(t, req{method: "POST", path: "/api/v1/tfstate/h/versions", token: "admin"})
	wantCode(t, "POST to versions", code, body, http.StatusMethodNotAllowed)
	wantAPIError(t, body, http.StatusMethodNotAllowed, api.ReasonMethodNotAllowed)
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tfstate/H/versions", token: "admin"})
	wantCode(t, "versions of a bad name", code, body, http.StatusBadRequest)
}

func TestStateStaleLockAndRestart(t *testing.T) {
	dir := t.TempDir() + "/data"
	// A fresh lock is not stale on a server whose stale age is an hour;
	// the same lock is on one whose stale age is a nanosecond.
	ts := startServer(t, Config{DataDir: dir, StaleLockAge: time.Hour}, true)
	code, body := ts.do(t, req{method: "LOCK", path: "/tfstate/s", token: "editor", body: lockJSON("lk", "alice@host")})
	wantCode(t, "LOCK", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "POST", path: "/tfstate/s?ID=lk", token: "editor", body: stateJSON(1, "lin", "")})
	wantCode(t, "POST", code, body, http.StatusOK)

	versions := func(ts *testServer) api.StateVersionList {
		tok := ""
		if _, ok := ts.tokens["admin"]; ok {
			tok = "admin"
		}
		code, body := ts.do(t, req{method: "GET", path: "/api/v1/tfstate/s/versions", token: tok})
		wantCode(t, "versions", code, body, http.StatusOK)
		var list api.StateVersionList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		return list
	}
	list := versions(ts)
	if list.Lock == nil || list.Lock.ID != "lk" || list.Lock.Token != "editor" || list.Lock.Who != "alice@host" || list.Lock.Stale {
		t.Fatalf("fresh lock = %+v", list.Lock)
	}
	if h := list.Items[0].LockHolder; h == nil || h.ID != "lk" || h.Token != "editor" {
		t.Fatalf("version's lock holder = %+v", h)
	}
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}

	// The lock survives a restart and is now reported stale, not broken.
	ts2 := startServer(t, Config{DataDir: dir, StaleLockAge: time.Nanosecond, TokensFile: ""}, false)
	ts2.tokens = testTokens{}
	list = versions(ts2)
	if list.Lock == nil || list.Lock.ID != "lk" || !list.Lock.Stale {
		t.Fatalf("lock after restart = %+v, want lk reported stale", list.Lock)
	}
	code, body = ts2.do(t, req{method: "LOCK", path: "/tfstate/s", body: lockJSON("other", "bob@host")})
	wantCode(t, "LOCK of a stale lock", code, body, http.StatusLocked)
	wantHolder(t, body, "lk", "editor")
	if !strings.Contains(ts2.logs.String(), "stale lock; an admin token can force-unlock it") {
		t.Errorf("a conflict with a stale lock is not logged as such:\n%s", ts2.logs.String())
	}
}

func TestStateOpenMode(t *testing.T) {
	ts := startServer(t, Config{}, false)
	ts.tokens = testTokens{}
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tfstate/x/versions"})
	wantCode(t, "anonymous admin request", code, body, http.StatusNotFound)
	code, body = ts.do(t, req{method: "LOCK", path: "/tfstate/x", body: lockJSON("a", "w")})
	wantCode(t, "anonymous LOCK", code, body, http.StatusOK)

	// Ephemeral tokens name their caller even without a tokens file.
	secret, revoke := ts.Tokens().Ephemeral("run-x-1", RoleEdit)
	code, body = ts.do(t, req{method: "LOCK", path: "/tfstate/y", body: lockJSON("b", "w"), bearer: secret})
	wantCode(t, "ephemeral LOCK", code, body, http.StatusOK)
	revoke()
	code, body = ts.do(t, req{method: "LOCK", path: "/tfstate/y", body: lockJSON("c", "w")})
	wantCode(t, "LOCK held by the ephemeral token", code, body, http.StatusLocked)
	wantHolder(t, body, "b", "run-x-1")

	srv, err := NewServer(Config{DataDir: t.TempDir() + "/d", Listen: "0.0.0.0:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "no tokens file") {
		t.Fatalf("Listen on 0.0.0.0 without tokens: %v, want a refusal", err)
	}
}

func TestServerEndpoints(t *testing.T) {
	ts := startServer(t, Config{Version: "v9.8.7"}, true)
	code, body := ts.do(t, req{method: "GET", path: "/healthz"})
	wantCode(t, "healthz", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "GET", path: "/readyz"})
	wantCode(t, "readyz", code, body, http.StatusOK)
	code, body = ts.do(t, req{method: "GET", path: "/version"})
	wantCode(t, "version", code, body, http.StatusOK)
	var v VersionInfo
	if err := json.Unmarshal(body, &v); err != nil || v.Version != "v9.8.7" {
		t.Fatalf("version = %s (%v)", body, err)
	}
}

func TestServerGracefulShutdown(t *testing.T) {
	ts := startServer(t, Config{}, true)
	state := stateJSON(1, "lin-g", `"`+strings.Repeat("y", 1<<20)+`"`)
	pr, pw := io.Pipe()
	hr, _ := http.NewRequest("POST", ts.URL()+"/tfstate/g", pr)
	hr.SetBasicAuth("editor", ts.tokens["editor"])
	hr.ContentLength = int64(len(state))
	result := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Error(err)
			result <- 0
			return
		}
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	// Half the body is sent and the handler is reading the rest; shut down
	// while the request is in flight. (The pause lets the server accept
	// the connection: one still in the listen backlog is not in flight.)
	pw.Write(state[:len(state)/2])
	time.Sleep(100 * time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("server stopped (%v) before its request in flight finished", err)
	default:
	}
	pw.Write(state[len(state)/2:])
	pw.Close()
	if code := <-result; code != http.StatusOK {
		t.Fatalf("in-flight POST during shutdown: %d, want 200", code)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	// The store was closed cleanly and holds the state.
	s, err := bolt.Open(ts.cfg.DataDir, &bolt.Options{OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.View(func(tx store.Tx) error {
		if got := store.CurrentState(tx, "g"); !bytes.Equal(got, state) {
			t.Errorf("state after shutdown has %d bytes, want %d", len(got), len(state))
		}
		return nil
	})
}
