package backend

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// FuzzTFState sends arbitrary requests to the state backend behind
// authentication and the request log: it must never panic, and must
// answer with one of the codes the protocol uses.
func FuzzTFState(f *testing.F) {
	tokensFile, toks := writeTokensFile(f)
	st, err := bolt.Open(filepath.Join(f.TempDir(), "data"), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	tokens, err := LoadTokens(tokensFile)
	if err != nil {
		f.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	h := LogRequests(log, Authenticate(tokens, log, NewStateHandler(st, StateOptions{MaxBytes: 1 << 16, History: 3, Logger: log})))
	users := []string{"", "viewer", "editor", "editor2", "admin"}

	f.Add("GET", "/tfstate/t1", "", uint8(1), "", []byte(nil))
	f.Add("POST", "/tfstate/t1", "ID=abc", uint8(2), "", stateJSON(1, "lin", ""))
	f.Add("POST", "/tfstate/t1", "", uint8(2), "1B2M2Y8AsgTpgAmY7PhCfg==", stateJSON(2, "lin", ""))
	f.Add("LOCK", "/tfstate/t1", "", uint8(2), "", lockJSON("abc", "me"))
	f.Add("UNLOCK", "/tfstate/t1", "", uint8(3), "", lockJSON("abc", "me"))
	f.Add("UNLOCK", "/tfstate/t1", "", uint8(4), "", []byte(nil))
	f.Add("DELETE", "/tfstate/t1", "ID=abc", uint8(2), "", []byte(nil))
	f.Add("GET", "/tfstate/t1", "version=1", uint8(4), "", []byte(nil))
	f.Add("GET", "/api/v1/tfstate/t1/versions", "", uint8(4), "", []byte(nil))
	f.Add("PATCH", "/tfstate/Bad_Name", "", uint8(7), "x", []byte("{"))

	allowed := map[int]bool{200: true, 204: true, 400: true, 401: true, 403: true, 404: true, 405: true, 409: true, 413: true, 423: true}
	f.Fuzz(func(t *testing.T, method, path, query string, user uint8, contentMD5 string, body []byte) {
		r, err := http.NewRequest(method, "http://rezuscloud.test/", bytes.NewReader(body))
		if err != nil {
			return
		}
		r.URL.Path = path
		r.URL.RawQuery = query
		switch u := int(user) % 8; {
		case u > 0 && u < len(users):
			r.SetBasicAuth(users[u], toks[users[u]])
		case u == 5:
			r.Header.Set("Authorization", "Bearer "+toks["editor"])
		case u == 6:
			r.SetBasicAuth("admin", "wrong")
		case u == 7:
			r.Header.Set("Authorization", contentMD5)
		}
		if contentMD5 != "" {
			r.Header.Set("Content-MD5", contentMD5)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if !allowed[w.Code] {
			t.Fatalf("%s %s?%s as %d: status %d: %s", method, path, query, user, w.Code, w.Body)
		}
		if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("401 without WWW-Authenticate")
		}
	})
}
