// Live updates of the RezusCloud dashboard. Every page is whole without
// this script; with it, the page follows the API's watch streams.
//
// The page's body names its streams (data-watch) and the store's
// resourceVersion it shows (data-rv). Each region of the page
// (data-part="NAME") names the kinds of object it shows (data-kinds). An
// event of such a kind marks the region stale; stale regions are fetched
// again from the server in one request (the page's URL with ?part=A,B) and
// swapped in, at most once every REFRESH_GAP ms however many events
// arrive. The browser's EventSource resumes a lost stream from the last
// event id it saw (Last-Event-ID); #live says whether the streams are up.
"use strict";
(function () {
  var REFRESH_GAP = 500; // ms between two refreshes: two repaints a second at most
  var SETTLE = 100; // ms an event waits for the others of its burst
  var RESTART = 3000; // ms before a stream the server refused is opened again

  var body = document.body;
  var indicator = document.getElementById("live");
  var watches = (body.getAttribute("data-watch") || "").split(" ").filter(Boolean);
  var skew = Date.parse(body.getAttribute("data-now") || "") - Date.now() || 0;
  var stale = {};
  var timer = 0;
  var busy = false;
  var last = 0;
  var ended = "";
  var leaving = false; // a form was sent (logging out, say): the page is left
  var inflight = null; // the AbortController of the refresh under way
  var streams = [];
  var logs = [];

  function regions() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-part]"));
  }

  function markKind(kind) {
    regions().forEach(function (el) {
      if ((" " + el.getAttribute("data-kinds") + " ").indexOf(" " + kind + " ") >= 0) {
        stale[el.getAttribute("data-part")] = true;
      }
    });
    schedule();
  }

  function markAll() {
    regions().forEach(function (el) { stale[el.getAttribute("data-part")] = true; });
    schedule();
  }

  function schedule() {
    if (timer || busy || ended || leaving || Object.keys(stale).length === 0) return;
    timer = setTimeout(refresh, Math.max(SETTLE, last + REFRESH_GAP - Date.now()));
  }

  function refresh() {
    timer = 0;
    var names = Object.keys(stale);
    stale = {};
    busy = true;
    last = Date.now();
    var q = new URLSearchParams(location.search);
    q.set("part", names.join(","));
    inflight = window.AbortController ? new AbortController() : null;
    fetch(location.pathname + "?" + q.toString(), { credentials: "same-origin", cache: "no-store", signal: inflight && inflight.signal })
      .then(function (resp) {
        if (resp.status === 401) return end("Session ended: reload to log in");
        if (resp.status === 404) return end("Gone: this no longer exists");
        if (!resp.ok) throw new Error("HTTP " + resp.status);
        return resp.text().then(swap);
      })
      .catch(function () {
        names.forEach(function (n) { stale[n] = true; });
        last = Date.now() + RESTART;
      })
      .then(function () {
        busy = false;
        inflight = null;
        schedule();
      });
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    Array.prototype.forEach.call(doc.querySelectorAll("[data-part]"), function (fresh) {
      var name = fresh.getAttribute("data-part");
      regions().forEach(function (old) {
        if (old.getAttribute("data-part") === name) old.replaceWith(document.importNode(fresh, true));
      });
    });
    ages();
  }

  function end(why) {
    ended = why;
    streams.forEach(function (s) { if (s.es) s.es.close(); });
    show();
  }

  // show sets #live from the streams' own states, at each of their open
  // and error events: live while every stream is open; reconnecting…
  // while one that failed (lost, or refused) is not open again;
  // connecting… while one waits for its first answer.
  function show() {
    if (!indicator) return;
    var down = streams.filter(function (s) { return !s.es || s.es.readyState !== EventSource.OPEN; });
    var lost = down.some(function (s) { return s.failed; });
    indicator.hidden = false;
    indicator.className = "live" + (ended ? " ended" : lost ? " reconnecting" : down.length ? " connecting" : "");
    indicator.textContent = ended || (lost ? "reconnecting…" : down.length ? "connecting…" : "live");
  }

  // open follows one watch stream. A stream the browser gives up on (the
  // server refused it, for instance because its resourceVersion is older
  // than the history kept) starts again without one: the server then sends
  // the current state, and every region is fetched again.
  function open(s, rv) {
    var url = s.url + (s.url.indexOf("?") < 0 ? "?" : "&") + "sse=true" + (rv ? "&resourceVersion=" + rv : "");
    var es = new EventSource(url);
    s.es = es;
    es.onopen = function () {
      s.failed = false;
      show();
    };
    es.onmessage = function (e) {
      var ev;
      try { ev = JSON.parse(e.data); } catch (err) { return; }
      if (ev && ev.object && ev.object.kind) markKind(ev.object.kind);
    };
    es.onerror = function () {
      s.failed = true;
      show();
      if (es.readyState === EventSource.CLOSED && !ended) {
        setTimeout(function () {
          if (ended) return;
          markAll();
          open(s, "");
        }, RESTART);
      }
    };
  }

  // ages keeps relative times current: "12s ago" turns into "1m ago".
  function ages() {
    var now = Date.now() + skew;
    Array.prototype.forEach.call(document.querySelectorAll("time[data-age]"), function (el) {
      var t = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(t)) el.textContent = age(now - t);
    });
  }

  function age(ms) {
    var ahead = ms < 0;
    var s = Math.floor(Math.abs(ms) / 1000);
    var text;
    if (s < 120) text = s + "s";
    else if (s < 7200) text = Math.floor(s / 60) + "m";
    else if (s < 172800) text = Math.floor(s / 3600) + "h";
    else if (s < 63072000) text = Math.floor(s / 86400) + "d";
    else text = Math.floor(s / 31536000) + "y";
    return ahead ? "in " + text : text + " ago";
  }

  // A region with data-every="N" is fetched again every N seconds: it
  // shows something no stream carries, such as the source's last fetch.
  function periodic() {
    regions().forEach(function (el) {
      var every = parseInt(el.getAttribute("data-every"), 10);
      if (every > 0) {
        setInterval(function () {
          stale[el.getAttribute("data-part")] = true;
          schedule();
        }, every * 1000);
      }
    });
  }

  // tail follows a machine's log into the <pre> of its section, hidden
  // until the first line; the line above it (data-log-state) says why
  // there is none. A stream that ends (the machine restarted) opens again
  // by itself and sends the log's tail anew, which replaces what is shown.
  function tail(section) {
    var pre = section.querySelector("pre");
    var state = section.querySelector("[data-log-state]");
    var url = section.getAttribute("data-logs");
    var es = null;
    function say(text) {
      if (!state) return;
      state.textContent = text;
      state.hidden = !text;
    }
    function start() {
      es = new EventSource(url + (url.indexOf("?") < 0 ? "?" : "&") + "sse=true");
      es.onopen = function () {
        while (pre.firstChild) pre.removeChild(pre.firstChild);
        pre.hidden = true;
        say("No lines yet: they show as the machine writes them.");
      };
      es.onmessage = function (e) {
        say("");
        pre.hidden = false;
        pre.appendChild(document.createTextNode(e.data + "\n"));
        while (pre.childNodes.length > 1000) pre.removeChild(pre.firstChild);
        pre.scrollTop = pre.scrollHeight;
      };
      es.addEventListener("end", function () {
        say("The machine ended its log; it is followed again once the machine answers.");
      });
      es.onerror = function (e) {
        if (e.data) say("The log stopped: " + e.data); // the server's own error event
        if (es.readyState === EventSource.CLOSED) {
          say(pre.firstChild ? "The log stopped." : "The machine's log could not be read: the machine does not answer, or the session ended.");
        }
      };
    }
    start();
    logs.push({ start: start, stop: function () { if (es) es.close(); } });
  }

  if (window.EventSource) {
    var rv = body.getAttribute("data-rv") || "";
    watches.forEach(function (url) {
      var s = { url: url, es: null, failed: false };
      streams.push(s);
      open(s, rv);
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-logs]"), tail);
    if (streams.length) show();
    // A browser holds few connections to one server (six over HTTP/1.1):
    // a page that is left gives its streams back at once, and one that
    // comes back from the back-forward cache opens them again.
    window.addEventListener("pagehide", function () {
      streams.forEach(function (s) { if (s.es) s.es.close(); });
      logs.forEach(function (l) { l.stop(); });
    });
    window.addEventListener("pageshow", function (e) {
      if (!e.persisted || ended) return;
      streams.forEach(function (s) { open(s, ""); });
      logs.forEach(function (l) { l.start(); });
      show();
      markAll();
    });
  }
  // A form sent leaves the page: no refresh starts any more, and the one
  // under way is dropped, so that it does not meet the session the form
  // (logout) ended.
  document.addEventListener("submit", function () {
    leaving = true;
    clearTimeout(timer);
    timer = 0;
    if (inflight) inflight.abort();
  }, true);
  window.addEventListener("pageshow", function (e) {
    if (e.persisted) {
      leaving = false;
      schedule();
    }
  });
  periodic();
  ages();
  setInterval(ages, 15000);
})();
