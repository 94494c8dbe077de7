package backend

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/machinelog"
	"github.com/rezuscloud/rezuscloud/store"
)

// Machine logs are read-only streams from the Talos API of a tenant's
// machines:
//
//	GET /api/v1/tenants/{name}/machines/{id}/logs?service=NAME&follow=true&tailLines=N
//	GET /api/v1/tenants/{name}/machines/{id}/dmesg?follow=true&tailLines=N
//
// They need the edit role, from a token or a dashboard session, as every
// read of the API accepts them (Server.Handle). The answer is chunked text/plain, the lines as
// the machine sends them; with sse=true (or Accept: text/event-stream) it
// is Server-Sent Events, one `data:` event per line, and an `event: end`
// when the stream is over. An error after the stream began ends a text
// answer with the trailer Rezuscloud-Stream-Error, and an SSE answer with
// an `event: error` whose data is the message.
//
// service defaults to machined. tailLines is at most MaxTailLines, and
// DefaultTailLines when absent; for dmesg with follow=true, tailLines=0
// sends only new kernel messages and any other value the kernel's whole
// buffer first. A follow ends when the client goes away, when the machine
// ends it (it reboots) or when the server shuts down. A machine that does
// not answer gets 502 (refused, or it refuses the tenant's credentials)
// or 504 (no answer in time) before any line is sent.
//
// Every access, granted, refused or failed, is written to the audit log
// with who, what and when, and so is the end of a stream with its size.

// MachineLogs opens log streams of tenants' machines. The reconciler
// implements it. Errors that wrap store.ErrNotFound answer 404,
// machinelog.ErrUnreachable 502, machinelog.ErrTimeout 504 and
// machinelog.ErrBadRequest 400; their messages reach the client, so they
// must not hold secrets.
type MachineLogs interface {
	OpenLogs(ctx context.Context, tenant, machine string, req machinelog.Request) (machinelog.Stream, error)
}

// Bounds of the log endpoints.
const (
	// MaxTailLines is the most lines a client may ask for at once.
	MaxTailLines = 10000
	// DefaultTailLines is what a request without tailLines gets.
	DefaultTailLines = 1000
	// MaxLogStreams is how many log streams the server serves at once;
	// more answer 503 with Retry-After.
	MaxLogStreams = 64
	// logStartWait is how long a stream may take to send its first lines
	// before the answer starts anyway (a followed log that is quiet).
	logStartWait = 2 * time.Second
	// logKeepAlive is how often an idle SSE stream gets a comment.
	logKeepAlive = 15 * time.Second
	// maxSSELine splits longer lines into several events.
	maxSSELine = 64 << 10
	// StreamErrorTrailer carries an error that ended a text stream.
	StreamErrorTrailer = "Rezuscloud-Stream-Error"
)

var serviceRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// logServer serves the log endpoints of one Server.
type logServer struct {
	p     MachineLogs
	audit *slog.Logger
	log   *slog.Logger
	slots chan struct{}
	// stop ends every stream when the server shuts down.
	stop context.Context
}

// ServeMachineLogs mounts the log endpoints (see machinelog.Request) on p. Every
// access is written to audit (the server's logger when nil). Streams end
// when the server shuts down. Call it before Run.
func (s *Server) ServeMachineLogs(p MachineLogs, audit *slog.Logger) {
	if audit == nil {
		audit = s.log
	}
	stop, cancel := context.WithCancel(context.Background())
	s.http.RegisterOnShutdown(cancel)
	ls := &logServer{p: p, audit: audit, log: s.log, slots: make(chan struct{}, MaxLogStreams), stop: stop}
	for what, dmesg := range map[string]bool{"logs": false, "dmesg": true} {
		authed := s.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ls.serve(w, r, dmesg)
		}))
		// Past the server's authentication, so that attempts without
		// valid credentials reach the audit log too.
		s.HandleUnauthenticated("GET /api/v1/tenants/{name}/machines/{id}/"+what, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusWriter{ResponseWriter: w}
			authed.ServeHTTP(rec, r)
			if rec.status == http.StatusUnauthorized {
				s.refused.warn(audit, "machine logs refused", clientKey(r.RemoteAddr), what, "who", "(unauthenticated)", "what", what, "tenant", r.PathValue("name"),
					"machine", r.PathValue("id"), "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr, "reason", "credentials")
			}
		}))
	}
}

// parseLogRequest reads a log request's query.
func parseLogRequest(r *http.Request, dmesg bool) (machinelog.Request, bool, error) {
	q := r.URL.Query()
	req := machinelog.Request{Dmesg: dmesg, TailLines: DefaultTailLines}
	if !dmesg {
		req.Service = "machined"
		if s, ok := first(q, "service"); ok {
			if !serviceRE.MatchString(s) {
				return req, false, api.Errorf(http.StatusBadRequest, "service %q: want a Talos service name such as machined, kubelet or etcd", s)
			}
			req.Service = s
		}
	} else if _, ok := first(q, "service"); ok {
		return req, false, api.Errorf(http.StatusBadRequest, "dmesg is the kernel's log and takes no service")
	}
	boolParam := func(name string, into *bool) error {
		if s, ok := first(q, name); ok {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return api.Errorf(http.StatusBadRequest, "%s %q: want true or false", name, s)
			}
			*into = b
		}
		return nil
	}
	var sse bool
	if err := boolParam("follow", &req.Follow); err != nil {
		return req, false, err
	}
	if err := boolParam("sse", &sse); err != nil {
		return req, false, err
	}
	for _, a := range r.Header.Values("Accept") {
		sse = sse || strings.Contains(a, "text/event-stream")
	}
	if s, ok := first(q, "tailLines"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxTailLines {
			return req, false, api.Errorf(http.StatusBadRequest, "tailLines %q: want a whole number from 0 to %d", s, MaxTailLines)
		}
		req.TailLines = n
	}
	return req, sse, nil
}

func (ls *logServer) serve(w http.ResponseWriter, r *http.Request, dmesg bool) {
	tenant, machine := r.PathValue("name"), r.PathValue("id")
	what := "logs"
	if dmesg {
		what = "dmesg"
	}
	id, _ := IdentityFrom(r.Context())
	attrs := append(id.Who(), "role", id.Role.String(), "what", what, "tenant", tenant, "machine", machine,
		"at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)
	if _, ok := requireRole(w, r, RoleEdit, "reading a machine's "+what); !ok {
		ls.audit.Warn("machine logs refused", append(attrs, "reason", "role")...)
		return
	}
	req, sse, err := parseLogRequest(r, dmesg)
	if err != nil {
		ls.audit.Warn("machine logs refused", append(attrs, "reason", err.Error())...)
		api.WriteError(w, err)
		return
	}
	attrs = append(attrs, "service", req.Service, "follow", req.Follow, "tailLines", req.TailLines)
	select {
	case ls.slots <- struct{}{}:
		defer func() { <-ls.slots }()
	default:
		ls.audit.Warn("machine logs refused", append(attrs, "reason", "too many streams")...)
		w.Header().Set("Retry-After", "5")
		api.WriteError(w, api.Errorf(http.StatusServiceUnavailable, "the server serves %d log streams already; try again later", MaxLogStreams))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(ls.stop, cancel)()
	stream, err := ls.p.OpenLogs(ctx, tenant, machine, req)
	if err != nil {
		ls.audit.Warn("machine logs failed", append(attrs, "err", err.Error())...)
		ls.writeOpenError(w, r, tenant, machine, err)
		return
	}
	defer stream.Close()
	ls.audit.Info("machine logs", attrs...)
	start := time.Now()
	n, err := ls.pump(ctx, w, r, stream, sse)
	end := append(attrs, "bytes", n, "seconds", time.Since(start).Seconds())
	if err != nil {
		end = append(end, "err", err.Error())
	}
	ls.audit.Info("machine logs ended", end...)
}

// writeOpenError answers a stream that could not be opened.
func (ls *logServer) writeOpenError(w http.ResponseWriter, r *http.Request, tenant, machine string, err error) {
	code := 0
	switch {
	case errors.Is(err, store.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, machinelog.ErrUnreachable):
		code = http.StatusBadGateway
	case errors.Is(err, machinelog.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
	case errors.Is(err, machinelog.ErrBadRequest):
		code = http.StatusBadRequest
	}
	if code == 0 || r.Context().Err() != nil {
		ls.log.Error("machine logs", "tenant", tenant, "machine", machine, "err", err)
		api.WriteError(w, api.Errorf(http.StatusInternalServerError, "the logs of machine %s could not be read; the server log has the details", machine))
		return
	}
	api.WriteError(w, api.Errorf(code, "%v", err))
}

// next is one result of a stream's Next.
type next struct {
	b   []byte
	err error
}

// pump copies the stream to the client until it ends, the client goes
// away or the server shuts down. It returns the bytes of log text sent and
// the error that ended the stream early, if any.
func (ls *logServer) pump(ctx context.Context, w http.ResponseWriter, r *http.Request, stream machinelog.Stream, sse bool) (int64, error) {
	out := &logWriter{w: w, rc: http.NewResponseController(w), sse: sse}
	chunks := make(chan next)
	go func() {
		defer close(chunks)
		for {
			b, err := stream.Next()
			select {
			case chunks <- next{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// Wait a little for the first lines, so that a stream that fails at
	// once still gets a proper error answer.
	var pending *next
	select {
	case c, ok := <-chunks:
		if ok {
			pending = &c
		}
	case <-time.After(logStartWait):
	case <-ctx.Done():
		return 0, nil
	}
	if pending != nil && pending.err != nil && pending.err != io.EOF {
		ls.writeOpenError(w, r, r.PathValue("name"), r.PathValue("id"), pending.err)
		return 0, pending.err
	}
	out.begin()
	defer out.finish()
	if r.Method == http.MethodHead {
		return 0, nil
	}
	keepAlive := time.NewTicker(logKeepAlive)
	defer keepAlive.Stop()
	for {
		var c next
		if pending != nil {
			c, pending = *pending, nil
		} else {
			var ok bool
			select {
			case c, ok = <-chunks:
				if !ok {
					return out.n, ctx.Err()
				}
			case <-keepAlive.C:
				if sse && out.comment("keep-alive") != nil {
					return out.n, nil
				}
				continue
			case <-ctx.Done():
				return out.n, nil
			}
		}
		switch {
		case c.err == io.EOF:
			out.end(nil)
			return out.n, nil
		case c.err != nil:
			if ctx.Err() != nil { // the client went or the server stops
				return out.n, nil
			}
			out.end(c.err)
			return out.n, c.err
		}
		if err := out.chunk(c.b); err != nil {
			return out.n, nil // the client does not read any more
		}
	}
}

// logWriter writes one log answer, text or SSE.
type logWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	sse     bool
	n       int64
	partial []byte // SSE: the start of a line whose end has not come yet
}

func (lw *logWriter) begin() {
	h := lw.w.Header()
	if lw.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Trailer", StreamErrorTrailer)
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	lw.w.WriteHeader(http.StatusOK)
	lw.rc.Flush()
}

// finish clears the write deadline, so that the connection can serve
// further requests.
func (lw *logWriter) finish() { lw.rc.SetWriteDeadline(time.Time{}) }

// write writes b within watchWriteTimeout: a client that does not read
// loses its stream.
func (lw *logWriter) write(b []byte) error {
	lw.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
	if _, err := lw.w.Write(b); err != nil {
		return err
	}
	return lw.rc.Flush()
}

func (lw *logWriter) chunk(b []byte) error {
	lw.n += int64(len(b))
	if !lw.sse {
		return lw.write(b)
	}
	var out bytes.Buffer
	data := append(lw.partial, b...)
	lw.partial = nil
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 && len(data) < maxSSELine {
			lw.partial = append([]byte(nil), data...)
			break
		}
		var line []byte
		if i >= 0 && i <= maxSSELine {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data[:maxSSELine], data[maxSSELine:]
		}
		event(&out, "", bytes.TrimRight(line, "\r"))
	}
	if out.Len() == 0 {
		return nil
	}
	return lw.write(out.Bytes())
}

// event writes one SSE event of one line of data.
func event(out *bytes.Buffer, name string, data []byte) {
	if name != "" {
		out.WriteString("event: " + name + "\n")
	}
	out.WriteString("data: ")
	out.Write(bytes.ReplaceAll(data, []byte("\r"), nil))
	out.WriteString("\n\n")
}

func (lw *logWriter) comment(text string) error { return lw.write([]byte(": " + text + "\n\n")) }

// end writes the end of a stream: the error that ended it, if any.
func (lw *logWriter) end(err error) {
	if !lw.sse {
		if err != nil {
			lw.w.Header().Set(StreamErrorTrailer, oneLine(err.Error()))
		}
		return
	}
	var out bytes.Buffer
	if len(lw.partial) > 0 {
		event(&out, "", lw.partial)
		lw.partial = nil
	}
	if err != nil {
		event(&out, "error", []byte(oneLine(err.Error())))
	} else {
		event(&out, "end", nil)
	}
	lw.write(out.Bytes())
}

func oneLine(s string) string {
	return api.Shorten(strings.Join(strings.Fields(s), " "))
}
