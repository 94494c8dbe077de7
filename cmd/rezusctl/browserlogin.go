package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/internal/client"
)

// browserLoginWait bounds how long a browser login waits for the person
// to sign in.
const browserLoginWait = 5 * time.Minute

// callbackPath is where the provider sends the browser back to, on a
// port of 127.0.0.1 chosen for each login: the provider must allow the
// redirect URI http://127.0.0.1/callback with any port (RFC 8252 7.3).
const callbackPath = "/callback"

// callback is what the provider's redirect brought back.
type callback struct {
	code string
	err  error
}

// browserLogin signs in with the authorization code flow and PKCE in a
// browser, which the provider sends back to a listener on 127.0.0.1. It
// returns the token and the nonce the ID token must carry.
func browserLogin(ctx context.Context, stderr io.Writer, conf *oauth2.Config) (*oauth2.Token, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", &exitError{code: exitUsage, msg: fmt.Sprintf("listen for the provider's answer: %v", err)}
	}
	conf.RedirectURL = fmt.Sprintf("http://%s%s", ln.Addr(), callbackPath)
	verifier, state, nonce := oauth2.GenerateVerifier(), oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	got := make(chan callback, 1)
	srv := &http.Server{Handler: callbackHandler(state, got), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // Close ends it.
	defer srv.Close()

	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce))
	if err := openBrowser(authURL); err != nil {
		fmt.Fprintf(stderr, "Open this address in a browser to sign in:\n  %s\n", authURL)
	} else {
		fmt.Fprintf(stderr, "Sign in in the browser that opened; if none did, open:\n  %s\n", authURL)
	}

	var cb callback
	select {
	case <-ctx.Done():
		return nil, "", &exitError{code: exitUsage, msg: "the login was interrupted before the sign-in"}
	case <-time.After(browserLoginWait):
		return nil, "", &exitError{code: exitUsage, msg: fmt.Sprintf("nobody signed in within %s", browserLoginWait)}
	case cb = <-got:
	}
	if cb.err != nil {
		return nil, "", &exitError{code: exitUsage, msg: "the sign-in failed: " + cb.err.Error()}
	}
	tok, err := conf.Exchange(ctx, cb.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, "", &exitError{code: exitUsage, msg: "redeem the authorization code: " + client.ProviderError(err).Error()}
	}
	return tok, nonce, nil
}

// callbackHandler takes the provider's redirect: a code, or an error,
// with this login's state. A request with another state is refused and
// the login goes on waiting.
func callbackHandler(state string, got chan<- callback) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != callbackPath {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if q.Get("state") != state {
			http.Error(w, "This answer is not for the login that is waiting (its state does not match).", http.StatusBadRequest)
			return
		}
		var cb callback
		switch {
		case q.Get("error") != "":
			msg := q.Get("error")
			if d := q.Get("error_description"); d != "" {
				msg += " (" + d + ")"
			}
			cb.err = errors.New("the provider answered " + msg)
		case q.Get("code") == "":
			cb.err = errors.New("the provider's answer holds no code")
		default:
			cb.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if cb.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<!doctype html><title>rezusctl login</title><p>The sign-in failed: %s</p>", html.EscapeString(cb.err.Error()))
		} else {
			fmt.Fprint(w, "<!doctype html><title>rezusctl login</title><p>Signed in. You can close this window and return to the terminal.</p>")
		}
		select {
		case got <- cb:
		default:
		}
	})
}

// openBrowser opens url with the command $BROWSER names ("%s" in it
// stands for the address, else the address is its last argument).
func openBrowser(url string) error {
	b := strings.TrimSpace(os.Getenv("BROWSER"))
	if b == "" {
		return errors.New("no $BROWSER")
	}
	first, _, _ := strings.Cut(b, ":")
	args := strings.Fields(first)
	replaced := false
	for i, a := range args {
		if strings.Contains(a, "%s") {
			args[i], replaced = strings.ReplaceAll(a, "%s", url), true
		}
	}
	if !replaced {
		args = append(args, url)
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() //nolint:errcheck // the browser outlives the login or not; either is fine.
	return nil
}
