package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWriteError(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   int
		reason Reason
		msg    string
	}{
		{Errorf(http.StatusNotFound, "no tenant %q", "a"), 404, ReasonNotFound, `no tenant "a"`},
		{fmt.Errorf("wrapped: %w", Errorf(http.StatusConflict, "busy")), 409, ReasonConflict, "busy"},
		{Errorf(http.StatusRequestEntityTooLarge, "big"), 413, ReasonBadRequest, "big"},
		{Errorf(http.StatusLocked, "locked"), 423, ReasonConflict, "locked"},
		{Errorf(http.StatusGone, "gone"), 410, ReasonGone, "gone"},
		{errors.New("open /secret/path: permission denied"), 500, ReasonInternalError, "internal error"},
	} {
		w := httptest.NewRecorder()
		WriteError(w, c.err)
		var got Error
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if w.Code != c.code || got.Code != c.code || got.Reason != c.reason || got.Status != "failure" || !strings.Contains(got.Message, c.msg) {
			t.Errorf("WriteError(%v) = %d %+v, want %d %s %q", c.err, w.Code, got, c.code, c.reason, c.msg)
		}
		if strings.Contains(w.Body.String(), "/secret/path") {
			t.Errorf("an internal error's details reached the client: %s", w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
}

func TestNewList(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, http.StatusOK, NewList[string](nil))
	if got := strings.TrimSpace(w.Body.String()); got != `{"items":[],"total":0}` {
		t.Fatalf("empty list = %s", got)
	}
	w = httptest.NewRecorder()
	WriteJSON(w, http.StatusOK, NewList([]int{3, 1}))
	if got := strings.TrimSpace(w.Body.String()); got != `{"items":[3,1],"total":2}` {
		t.Fatalf("list = %s", got)
	}
}

func TestErrorfBoundsEcho(t *testing.T) {
	huge := strings.Repeat("é", 500_000) // 1 MB of two-byte runes
	for _, c := range []struct {
		name string
		err  *Error
		end  string
	}{
		{"string", Errorf(http.StatusBadRequest, "offset %q: want a whole number", huge), `é": want a whole number`},
		{"bytes", Errorf(http.StatusBadRequest, "body %s", []byte(huge)), "éé"},
		{"error", Errorf(http.StatusBadRequest, "labelSelector: %v", fmt.Errorf("label selector %q: %q is bad", huge, huge)), `é" is bad`},
	} {
		if n := len(c.err.Message); n > MaxEcho+100 {
			t.Errorf("%s: message of %d bytes echoes its input", c.name, n)
		}
		if !strings.Contains(c.err.Message, " bytes left out)") || !strings.HasSuffix(c.err.Message, c.end) {
			t.Errorf("%s: message %q does not say it was cut, or lost its end", c.name, c.err.Message)
		}
		if !utf8.ValidString(c.err.Message) {
			t.Errorf("%s: cut inside a rune", c.name)
		}
	}
	if got := Errorf(http.StatusBadRequest, "limit %d of %s", 12345, "short").Message; got != "limit 12345 of short" {
		t.Errorf("short arguments changed: %q", got)
	}
}
