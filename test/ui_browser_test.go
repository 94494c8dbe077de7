package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// uiLiveDeadline is how soon a change in the store must show on an open
// page, without a reload.
const uiLiveDeadline = 2 * time.Second

// uiFirstLoadBudget bounds the bytes of a page's first load, everything
// included.
const uiFirstLoadBudget = 200 << 10

// TestUIBrowser opens the dashboard of a server that reconciles the
// example tenants in a real Chromium, and watches it follow pushes: the
// overview, a scale-up arriving on the open tenant page, an invalid
// commit's problems, every page at a phone's width, and at the end no
// request to another host and no console error on any of them.
func TestUIBrowser(t *testing.T) {
	chromiumPath(t) // skips before the server starts when there is no Chromium
	e := newE2E(t, e2eOptions{})
	s := e.srv
	b := newBrowser(t, s.URL())

	t.Run("overview", func(t *testing.T) {
		b.t = t
		s.WaitFor("the tenants to be active", func() bool {
			var list struct{ Items []schema.Tenant }
			s.mustGet("/api/v1/tenants", &list)
			return len(list.Items) == 2 && list.Items[0].Status.Phase == schema.TenantActive && list.Items[1].Status.Phase == schema.TenantActive
		})
		b.loadedBytes()
		b.open("/")
		if !b.waitFor(`document.getElementById("live").textContent === "live"`, 10*time.Second) {
			t.Errorf("the live indicator says %q, want live", eval[string](b, `document.getElementById("live").textContent`))
		}
		// The first load, everything included (the page, its stylesheet,
		// script and icon), within the budget of 200 KB.
		if n := b.loadedBytes(); n <= 0 || n > uiFirstLoadBudget {
			t.Errorf("the first load of the overview took %d bytes, want 1 to %d", n, uiFirstLoadBudget)
		} else {
			t.Logf("the first load of the overview: %d bytes over the wire", n)
		}
		for _, tenant := range []string{"production", "staging"} {
			row := eval[string](b, fmt.Sprintf(`(document.querySelector('a[href="/tenants/%s"]')||{closest(){return {innerText:""}}}).closest("tr").innerText`, tenant))
			if !strings.Contains(row, tenant) || !strings.Contains(row, "active") || !strings.Contains(row, "Succeeded") {
				t.Errorf("overview row of %s is %q: want its name, phase active and its last commit Succeeded", tenant, row)
			}
		}
		b.screenshot("overview")
	})

	t.Run("scale shows live", func(t *testing.T) {
		b.t = t
		b.open("/tenants/production")
		before := eval[int](b, `document.querySelectorAll("li.tile").length`)
		if before != 5 {
			t.Fatalf("%d machine tiles before the push, want 5", before)
		}
		b.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.rezusMarker = "same page"`))
		e.setCount("production", "workers", 3)
		sha := e.push("Scale production workers to 3")
		s.WaitFor("the API to list the new machine", func() bool { return len(s.tenantMachines("production")) == 6 })
		seen := time.Now()
		if !b.waitFor(`document.querySelectorAll("li.tile").length === 6`, uiLiveDeadline) {
			t.Fatalf("the open page shows %d tiles %v after the API listed 6", eval[int](b, `document.querySelectorAll("li.tile").length`), uiLiveDeadline)
		}
		t.Logf("the new tile showed %v after the API listed it", time.Since(seen).Round(time.Millisecond))
		if got := eval[string](b, `window.rezusMarker || ""`); got != "same page" {
			t.Error("the page was reloaded")
		}
		s.waitApplied(sha)
		b.waitFor(`document.body.innerText.includes("Scale production workers to 3")`, 5*time.Second)
		if !strings.Contains(b.text(), "Scale production workers to 3") {
			t.Error("the tenant's history does not show the new commit")
		}
		b.screenshot("tenant-scaled")
	})

	t.Run("invalid commit", func(t *testing.T) {
		b.t = t
		e.edit("clusters/staging/nodegroups.yaml", "providerConfig:\n    shape: small\n---", "providerConfig:\n    shape: small\n  colour: blue\n---")
		bad := e.push("Staging with a typo")
		c := s.WaitCommit(bad)
		if c.Status.Phase != schema.CommitInvalid || len(c.Status.Problems) == 0 {
			t.Fatalf("commit %s: %s with %d problems, want Invalid with problems", bad[:12], c.Status.Phase, len(c.Status.Problems))
		}
		p := c.Status.Problems[0]
		want := fmt.Sprintf("%s:%d: ", p.File, p.Line)
		b.open("/commits/" + bad)
		problems := eval[string](b, `Array.from(document.querySelectorAll(".problems li")).map(li => li.innerText).join("\n")`)
		if !strings.Contains(problems, want) || !strings.Contains(problems, "colour") || !strings.HasPrefix(want, "clusters/staging/nodegroups.yaml:") {
			t.Errorf("problems on the commit page:\n%s\nwant %q and the word colour", problems, want)
		}
		b.open("/")
		if !strings.Contains(b.text(), "Invalid") {
			t.Error("the overview's last commits do not show the invalid commit")
		}
		b.screenshot("commit-invalid")
		b.open("/commits/" + bad)
		b.screenshot("commit-invalid-problems")
	})

	t.Run("every page at 1280 and 390 px", func(t *testing.T) {
		b.t = t
		// A commit by an author with a long address, which the commits
		// page cuts short.
		const author = "Maximiliane Wolkenstein-Rodenegg <maximiliane.wolkenstein-rodenegg@platform-operations.example-corporation.internal>"
		e.work.Run("commit", "--allow-empty", "--author="+author, "-m", "Nothing changes, by someone with a long address")
		e.work.Push()
		long := e.work.Rev("HEAD")
		s.WaitCommit(long)
		// A control plane, once the server has seen its services and
		// its etcd membership.
		var cp string
		s.WaitFor("a control plane's services and etcd membership", func() bool {
			for _, m := range s.tenantMachines("production") {
				if st := m.Status; m.Spec.Role == schema.RoleControlPlane && len(st.Services) > 0 && st.Etcd != nil && st.Etcd.Member {
					cp = m.Metadata.Name
					return true
				}
			}
			return false
		})
		const notFound = "/tenants/production/machines/nope" // its 404 is no console error
		pages := []uiPage{
			{"overview", "/", []string{"h1", "#live", "table.tenants td.badges .badge", ".timeline", ".legend"}},
			{"tenant", "/tenants/production", []string{"h1", "#live", "li.tile", "table.conditions .badge"}},
			{"machine", "/tenants/production/machines/" + cp, []string{"h1", "#live", ".badges .badge", "[data-services] li", "[data-etcd] .badge", "section.logs h2"}},
			{"commits", "/commits", []string{"h1", "#live", "td.ref"}},
			{"commit", "/commits/" + long, []string{"h1", "#live", "pre.message", "dd.ref"}},
			{"not-found", notFound, []string{"h1", "main a"}},
		}
		for _, width := range []int{1280, 390} {
			if width == 390 {
				b.phone()
			} else {
				b.desktop()
			}
			for _, p := range pages {
				b.checkPage(p, width)
				switch p.name {
				case "machine":
					if !b.waitFor(`!document.querySelector("pre.log").hidden && document.querySelector("pre.log").textContent.length > 0`, 10*time.Second) {
						t.Errorf("at %dpx the machine's log shows no line: %q", width, eval[string](b, `document.querySelector("section.logs").innerText`))
					}
				case "commits", "commit":
					b.checkRefsAndAuthors(width, author)
				}
			}
		}
		b.desktop()
	})

	t.Run("no other host and no console error", func(t *testing.T) {
		b.t = t
		if n := b.checkRequests(); n < 10 {
			t.Errorf("only %d requests recorded: the recording misses some", n)
		}
		b.checkConsoleExcept("/tenants/production/machines/nope") // the page that is not found on purpose
	})

	t.Run("refused before it opened", func(t *testing.T) {
		b.t = t
		// The page's streams fail from their first try: the indicator
		// says so, and says live once they open.
		b.block("*://*:*/api/v1/*")
		b.open("/commits")
		if !b.waitFor(`document.getElementById("live").textContent.startsWith("reconnecting")`, 10*time.Second) {
			t.Errorf("with its streams refused the indicator says %q", eval[string](b, `document.getElementById("live").textContent`))
		}
		b.block()
		if !b.waitFor(`document.getElementById("live").textContent === "live"`, 20*time.Second) {
			t.Errorf("once its streams were let through the indicator says %q", eval[string](b, `document.getElementById("live").textContent`))
		}
		b.forgetConsole() // the refused connections
	})

	t.Run("reconnecting", func(t *testing.T) {
		b.t = t
		b.open("/tenants/staging")
		if !b.waitFor(`document.getElementById("live").textContent === "live"`, 10*time.Second) {
			t.Fatal("the page never went live")
		}
		s.Stop()
		if !b.waitFor(`document.getElementById("live").textContent.startsWith("reconnecting")`, 10*time.Second) {
			t.Errorf("with the server down the indicator says %q", eval[string](b, `document.getElementById("live").textContent`))
		}
		b.screenshot("reconnecting")
		s.Start()
		if !b.waitFor(`document.getElementById("live").textContent === "live"`, 20*time.Second) {
			t.Errorf("after the server came back the indicator says %q", eval[string](b, `document.getElementById("live").textContent`))
		}
		// The stream resumed from its last event: a change made now
		// still arrives.
		e.edit("clusters/staging/nodegroups.yaml", "  colour: blue\n", "")
		e.setCount("staging", "workers", 2)
		fixed := e.push("Staging fixed and scaled")
		s.WaitFor("staging's new machine", func() bool { return len(s.tenantMachines("staging")) == 3 })
		if !b.waitFor(`document.querySelectorAll("li.tile").length === 3`, uiLiveDeadline) {
			t.Errorf("after reconnecting the page shows %d tiles, want 3", eval[int](b, `document.querySelectorAll("li.tile").length`))
		}
		s.waitApplied(fixed)
		b.forgetConsole() // the refused connections while the server was down
	})
}

// TestUIBrowserLogin logs in to a server with a tokens file as a viewer:
// the pages show, downloads answer 403 and show no link, and logging out
// ends the session on the server, whatever copy of the cookie remains.
func TestUIBrowserLogin(t *testing.T) {
	chromiumPath(t) // skips before the server starts when there is no Chromium
	toks := writeUITokens(t)
	e := newE2E(t, e2eOptions{args: []string{"--tokens-file", toks.file}, noWait: true})
	s := e.srv
	admin := http.Header{"Authorization": {"Bearer " + toks.admin}}
	var machine string
	s.WaitFor("the first commit to be applied", func() bool {
		var list struct {
			Items []schema.Machine `json:"items"`
		}
		code, body := s.Request(http.MethodGet, "/api/v1/tenants/production/machines", nil, admin)
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Items) < 5 {
			return false
		}
		machine = list.Items[0].Metadata.Name
		return true
	})
	b := newBrowser(t, s.URL())

	b.open("/tenants/production")
	if loc := eval[string](b, "location.pathname"); loc != "/login" {
		t.Fatalf("without a session the dashboard shows %s, want /login", loc)
	}
	login := uiPage{"login", "/login?next=%2Ftenants%2Fproduction", []string{"h1", "#token", "form button[type=submit]"}}
	b.phone()
	b.checkPage(login, 390)
	b.desktop()
	b.checkPage(login, 1280)
	b.do("log in", chromedp.SendKeys(chromedp.ID("token"), toks.view), chromedp.Submit(chromedp.ID("token")))
	if !b.waitFor(`location.pathname === "/tenants/production" && !!document.querySelector("h1")`, 10*time.Second) {
		t.Fatalf("after login the browser is at %s", eval[string](b, "location.href"))
	}
	if !strings.Contains(b.text(), "viewer") {
		t.Error("the page does not say who is logged in")
	}
	session := b.cookie("rezuscloud_session")
	if session == "" || strings.Contains(session, toks.view) {
		t.Fatalf("session cookie %q: want one that is not the token", session)
	}
	// The page goes live on the session cookie alone.
	if !b.waitFor(`document.getElementById("live").textContent === "live"`, 60*time.Second) {
		t.Errorf("the live indicator says %q", eval[string](b, `document.getElementById("live").textContent`))
	}
	b.screenshot("tenant-as-viewer")

	b.open("/tenants/production/machines/" + machine)
	if n := eval[int](b, `document.querySelectorAll('a[href$="/config"]').length`); n != 0 {
		t.Error("a viewer sees the config download link")
	}
	config := "/api/v1/tenants/production/machines/" + machine + "/config"
	if code := eval[int](b, fmt.Sprintf(`fetch(%q).then(r => r.status)`, config)); code != http.StatusForbidden {
		t.Errorf("a viewer's download of %s: %d, want 403", config, code)
	}
	if code := eval[int](b, `fetch("/api/v1/tenants").then(r => r.status)`); code != http.StatusOK {
		t.Errorf("a viewer's API read with the session cookie: %d, want 200", code)
	}
	b.screenshot("machine-as-viewer")

	b.do("log out", chromedp.Click(chromedp.CSS(`form.who button`)))
	if !b.waitFor(`location.pathname === "/login"`, 10*time.Second) {
		t.Fatalf("after logout the browser is at %s", eval[string](b, "location.href"))
	}
	b.open("/tenants/production")
	if loc := eval[string](b, "location.pathname"); loc != "/login" {
		t.Errorf("after logout the dashboard shows %s, want /login", loc)
	}
	// The old cookie, replayed, is worthless: the server ended the session.
	cookie := http.Header{"Cookie": {"rezuscloud_session=" + session}}
	if code, _ := s.Request(http.MethodGet, "/api/v1/tenants", nil, cookie); code != http.StatusUnauthorized {
		t.Errorf("API with the logged-out session's cookie: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/tenants/production", nil)
	req.Header = cookie
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("page with the logged-out session's cookie: %d, want a redirect to the login page", resp.StatusCode)
	}
	b.screenshot("logged-out")
	b.checkRequests()
	b.checkConsoleExcept(config)
}

type uiTokens struct {
	file, view, admin string
}

// writeUITokens makes a view and an admin token and writes the tokens
// file.
func writeUITokens(t *testing.T) uiTokens {
	t.Helper()
	file, tokens := servertest.Tokens(t, map[string]string{"viewer": "view", "root": "admin"})
	return uiTokens{file: file, view: tokens["viewer"], admin: tokens["root"]}
}
