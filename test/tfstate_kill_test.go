package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// tfsBigState returns a JSON state of about size bytes whose content
// depends on serial.
func tfsBigState(serial int, size int) []byte {
	rng := rand.New(rand.NewPCG(uint64(serial), 7))
	pad := make([]byte, size)
	const hex = "0123456789abcdef"
	for i := range pad {
		pad[i] = hex[rng.IntN(16)]
	}
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.10.10","serial":%d,"lineage":"kill-test","outputs":{},"resources":[{"pad":"%s"}]}`, serial, pad)
}

// tfsBodyDone is a request body that reports when the client has sent all
// of it.
type tfsBodyDone struct {
	r    *bytes.Reader
	done chan time.Time
	once sync.Once
}

func (b *tfsBodyDone) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.once.Do(func() { b.done <- time.Now() })
	}
	return n, err
}

// TestTFStateKillMidPost kills the server with SIGKILL while it stores a
// large POST, at points spread over the time the POST takes to commit.
// After every restart the state must be wholly the old version or wholly
// the new one, and the lock must still be held and reported.
func TestTFStateKillMidPost(t *testing.T) {
	tokensFile, secrets := tfsTokens(t)
	p := servertest.Start(t, servertest.Options{TokensFile: tokensFile, Args: []string{"--state-history", "2"}})
	const size = 40 << 20
	req := func(p *servertest.Server, method, path, user string, body []byte) (int, []byte) {
		return tfsRequest(t, p.URL(), method, path, user, secrets[user], body)
	}
	const lockID = "kill-test-lock"
	lockInfo := fmt.Appendf(nil, `{"ID":%q,"Operation":"OperationTypeApply","Who":"alice@host","Version":"1.10.10","Created":"2026-01-01T00:00:00Z"}`, lockID)
	if code, body := req(p, "LOCK", "/tfstate/big", "alice", lockInfo); code != http.StatusOK {
		t.Fatalf("LOCK: %d %s", code, body)
	}

	// The first POST is not interrupted; it measures how long the server
	// works on a POST after the body has arrived.
	post := func(p *servertest.Server, body []byte) (sent chan time.Time, result chan int) {
		sent, result = make(chan time.Time, 1), make(chan int, 1)
		b := &tfsBodyDone{r: bytes.NewReader(body), done: sent}
		hr, _ := http.NewRequest("POST", p.URL()+"/tfstate/big?ID="+lockID, b)
		hr.ContentLength = int64(len(body))
		hr.SetBasicAuth("alice", secrets["alice"])
		go func() {
			resp, err := (&http.Client{}).Do(hr)
			if err != nil {
				result <- 0
				return
			}
			resp.Body.Close()
			result <- resp.StatusCode
		}()
		return sent, result
	}
	current := tfsBigState(1, size)
	sent, result := post(p, current)
	sentAt := <-sent
	if code := <-result; code != http.StatusOK {
		t.Fatalf("first POST: %d", code)
	}
	commit := time.Since(sentAt)
	t.Logf("a %d MB POST takes %v after its body is sent", size>>20, commit)

	outcomes := map[string]int{}
	const rounds = 6
	for i := 0; i < rounds; i++ {
		next := tfsBigState(i+2, size)
		sent, result := post(p, next)
		<-sent
		delay := commit * time.Duration(i) / (rounds - 1)
		time.Sleep(delay)
		p.Kill()
		code := <-result

		p.Start()
		code2, got := req(p, "GET", "/tfstate/big", "ops", nil)
		if code2 != http.StatusOK {
			t.Fatalf("round %d: GET after restart: %d", i, code2)
		}
		switch sha256.Sum256(got) {
		case sha256.Sum256(current):
			outcomes["old"]++
			if code == http.StatusOK {
				t.Fatalf("round %d: the POST was acknowledged, but the old version came back", i)
			}
		case sha256.Sum256(next):
			outcomes["new"]++
			current = next
		default:
			t.Fatalf("round %d (kill %v after the body): state after restart is neither the old nor the new version (%d bytes)", i, delay, len(got))
		}

		// The lock survived, and is reported and enforced.
		code2, body := req(p, "GET", "/api/v1/tfstate/big/versions", "ops", nil)
		var list api.StateVersionList
		if code2 != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("round %d: versions: %d %s", i, code2, body)
		}
		if list.Lock == nil || list.Lock.ID != lockID || list.Lock.Token != "alice" {
			t.Fatalf("round %d: lock after restart: %+v", i, list.Lock)
		}
		if !list.Items[0].Current || list.Items[0].Size != int64(len(current)) {
			t.Fatalf("round %d: versions listing disagrees with the state: %+v", i, list.Items[0])
		}
		code2, body = req(p, "LOCK", "/tfstate/big", "bob", []byte(`{"ID":"bobs"}`))
		if code2 != http.StatusLocked || !strings.Contains(string(body), lockID) {
			t.Fatalf("round %d: bob's LOCK after restart: %d %s", i, code2, body)
		}
	}
	t.Logf("after %d kills: %v", rounds, outcomes)

	// SIGHUP reloads the tokens file.
	tok, line, err := backend.NewToken("carol", backend.RoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := tfsRequest(t, p.URL(), "GET", "/tfstate/big", "carol", tok, nil); code != http.StatusUnauthorized {
		t.Fatalf("carol before she is in the tokens file: %d, want 401", code)
	}
	f, err := os.OpenFile(tokensFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, line)
	f.Close()
	p.Signal(syscall.SIGHUP)
	p.WaitFor("carol to be let in after SIGHUP", func() bool {
		code, _ := tfsRequest(t, p.URL(), "GET", "/tfstate/big", "carol", tok, nil)
		return code == http.StatusOK
	})

	// SIGTERM stops the server cleanly.
	p.Stop()
	if !strings.Contains(p.Log(), "msg=stopped") {
		t.Fatalf("no stop in the log after SIGTERM:\n%s", p.LogWithoutRequests())
	}
}
