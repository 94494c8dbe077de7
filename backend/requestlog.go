package backend

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

type requestLogKey struct{}

// requestLog collects what the request log line reports that only inner
// handlers learn, such as the token name.
type requestLog struct {
	token string
}

func requestLogFrom(ctx context.Context) *requestLog {
	rl, _ := ctx.Value(requestLogKey{}).(*requestLog)
	return rl
}

// LogRequests returns middleware that logs one line per request: method,
// path, status, duration, response bytes and the name of the token that
// made it, and "aborted" for an answer a handler broke off. It never logs
// query strings, headers or bodies, so no credential or state content
// reaches the log.
func LogRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rl := &requestLog{}
		sw := &statusWriter{ResponseWriter: w}
		aborted := true
		// Deferred, so that an answer a handler breaks off
		// (http.ErrAbortHandler) is logged too, as aborted.
		defer func() {
			if sw.status == 0 {
				sw.status = http.StatusOK
			}
			level := slog.LevelInfo
			if sw.status >= 500 || aborted {
				level = slog.LevelError
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", sw.status),
				slog.Duration("duration", time.Since(start)),
				slog.Int64("bytes", sw.bytes),
				slog.String("token", rl.token),
			}
			if aborted {
				attrs = append(attrs, slog.Bool("aborted", true))
			}
			log.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestLogKey{}, rl)))
		aborted = false
	})
}

// statusWriter records the status code and body size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines of the
// underlying writer, which streaming (watch) responses need.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
