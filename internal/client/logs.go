package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// LogOptions select what a log stream sends.
type LogOptions struct {
	// Dmesg asks for the kernel log instead of a service's.
	Dmesg bool
	// Service names the service; empty means the server's default
	// (machined). Not for Dmesg.
	Service string
	// Follow keeps the stream open for new lines until ctx ends.
	Follow bool
	// TailLines is how many of the last lines come first; negative means
	// the server's default.
	TailLines int
}

// StreamErrorTrailer is the trailer in which the server reports an error
// that ended a log stream after it began.
const StreamErrorTrailer = "Rezuscloud-Stream-Error"

// MachineLogsPath is the log stream of a machine of a tenant; dmesg
// selects the kernel log.
func MachineLogsPath(tenant, machine string, dmesg bool) string {
	if dmesg {
		return MachinePath(tenant, machine) + "/dmesg"
	}
	return MachinePath(tenant, machine) + "/logs"
}

// Logs opens the log stream of a machine of a tenant, as plain text. Read
// it to its end; a stream that the server ended with an error returns that
// error from Read instead of io.EOF. Close it when done.
func (c *Client) Logs(ctx context.Context, tenant, machine string, o LogOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if o.Service != "" {
		q.Set("service", o.Service)
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.TailLines >= 0 {
		q.Set("tailLines", strconv.Itoa(o.TailLines))
	}
	path := MachineLogsPath(tenant, machine, o.Dmesg)
	resp, err := c.do(ctx, path, q, "text/plain")
	if err != nil {
		return nil, err
	}
	return &logBody{ReadCloser: resp.Body, trailer: func() string { return resp.Trailer.Get(StreamErrorTrailer) }, path: path, ctx: ctx, server: c.Server()}, nil
}

// logBody reads a log stream and turns its end into the error the server
// reported, if any.
type logBody struct {
	io.ReadCloser
	trailer func() string
	path    string
	server  string
	ctx     context.Context
}

func (b *logBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		if msg := b.trailer(); msg != "" {
			return n, fmt.Errorf("GET %s: the stream ended: %s", b.path, msg)
		}
	case err != nil && b.ctx.Err() != nil:
		return n, b.ctx.Err()
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return n, &ConnError{Server: b.server, Err: err}
	case err != nil:
		return n, fmt.Errorf("GET %s: the server ended the stream early", b.path)
	}
	return n, err
}
