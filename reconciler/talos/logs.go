package talos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/machinelog"
)

// LogAnswerTimeout is how long a machine may take to answer before its
// logs are given up: the check before a stream opens (Version) must come
// back within it.
const LogAnswerTimeout = 5 * time.Second

// maxDmesgTail bounds the bytes of kernel log kept to send the last lines
// of a dmesg that is not followed.
const maxDmesgTail = 4 << 20

// OpenLogs opens a read-only log stream of one machine through c, an
// os:admin client of the tenant; release is called once the stream is
// closed (to hand c back or close it). label names the machine in errors.
//
// It first asks the machine for its version, within LogAnswerTimeout,
// so that a machine that refuses the connection or the tenant's
// credentials, or does not answer, fails at once with an error that wraps
// machinelog.ErrUnreachable or machinelog.ErrTimeout.
func OpenLogs(ctx context.Context, c *client.Client, release func(), label string, req machinelog.Request) (machinelog.Stream, error) {
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, LogAnswerTimeout)
	_, err := c.Version(pctx)
	cancel()
	if err != nil {
		return nil, logError(label, err)
	}
	sctx, stop := context.WithCancel(ctx)
	ls := &logStream{label: label, cancel: stop, release: release}
	if req.Dmesg {
		tail := req.TailLines == 0
		ls.recv, err = c.Dmesg(sctx, req.Follow, tail)
		if !req.Follow && !tail {
			ls.keep = req.TailLines
		}
	} else {
		ls.recv, err = c.Logs(sctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, req.Service, req.Follow, int32(req.TailLines))
	}
	if err != nil {
		stop()
		return nil, logError(label, err)
	}
	ok = true
	return ls, nil
}

// dataStream is what Logs and Dmesg return.
type dataStream interface {
	Recv() (*common.Data, error)
}

// logStream implements machinelog.Stream over a Talos data stream.
type logStream struct {
	label   string
	recv    dataStream
	cancel  context.CancelFunc
	release func()
	once    sync.Once

	// keep > 0 buffers the whole stream and sends its last keep lines.
	keep int
	done bool
}

var _ machinelog.Stream = (*logStream)(nil)

// Next implements machinelog.Stream.
func (ls *logStream) Next() ([]byte, error) {
	if ls.keep > 0 {
		return ls.tail()
	}
	for {
		d, err := ls.recv.Recv()
		if err != nil {
			return nil, ls.streamError(err)
		}
		if e := d.GetMetadata().GetError(); e != "" {
			return nil, fmt.Errorf("machine %s: %s: %w", ls.label, e, machinelog.ErrBadRequest)
		}
		if len(d.GetBytes()) > 0 {
			return d.GetBytes(), nil
		}
	}
}

// tail reads the whole stream and returns its last ls.keep lines, kept
// within maxDmesgTail bytes.
func (ls *logStream) tail() ([]byte, error) {
	if ls.done {
		return nil, io.EOF
	}
	ls.done = true
	var lines [][]byte
	size, partial := 0, []byte(nil)
	add := func(l []byte) {
		lines = append(lines, l)
		size += len(l)
		for len(lines) > ls.keep || (size > maxDmesgTail && len(lines) > 1) {
			size -= len(lines[0])
			lines = lines[1:]
		}
	}
	for {
		d, err := ls.recv.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, ls.streamError(err)
		}
		b := append(partial, d.GetBytes()...)
		partial = nil
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				partial = append([]byte(nil), b...)
				break
			}
			add(append([]byte(nil), b[:i+1]...))
			b = b[i+1:]
		}
	}
	if len(partial) > 0 {
		add(partial)
	}
	if len(lines) == 0 {
		return nil, io.EOF
	}
	return bytes.Join(lines, nil), nil
}

// streamError turns an error of an open stream into what the backend
// shows: EOF at the end, the machine going away as unreachable.
func (ls *logStream) streamError(err error) error {
	if err == io.EOF {
		return io.EOF
	}
	return logError(ls.label, err)
}

// Close implements machinelog.Stream.
func (ls *logStream) Close() error {
	ls.once.Do(func() {
		ls.cancel()
		ls.release()
	})
	return nil
}

// logError describes a failed call of a machine's log API and wraps the
// backend error that says how to answer it.
func logError(label string, err error) error {
	s, _ := status.FromError(err)
	msg := s.Message()
	switch {
	case errors.Is(err, context.Canceled), s.Code() == codes.Canceled:
		return fmt.Errorf("machine %s: %w", label, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded), s.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("machine %s did not answer within %s: %w", label, LogAnswerTimeout, machinelog.ErrTimeout)
	case s.Code() == codes.Unavailable && strings.Contains(msg, "authentication handshake failed"):
		return fmt.Errorf("machine %s does not accept the tenant's credentials (a machine in maintenance mode has no config yet): %s: %w",
			label, handshakeReason(msg), machinelog.ErrUnreachable)
	case s.Code() == codes.Unavailable:
		return fmt.Errorf("machine %s does not answer: %s: %w", label, msg, machinelog.ErrUnreachable)
	case s.Code() == codes.PermissionDenied, s.Code() == codes.Unauthenticated:
		return fmt.Errorf("machine %s refuses the tenant's credentials: %s: %w", label, msg, machinelog.ErrUnreachable)
	case s.Code() == codes.Unimplemented:
		return fmt.Errorf("machine %s cannot serve logs now: %s: %w", label, msg, machinelog.ErrUnreachable)
	case s.Code() == codes.Unknown, s.Code() == codes.NotFound, s.Code() == codes.InvalidArgument:
		return fmt.Errorf("machine %s: %s: %w", label, msg, machinelog.ErrBadRequest)
	}
	return fmt.Errorf("machine %s: %w", label, err)
}

// handshakeReason keeps the end of gRPC's handshake message, which says
// what was wrong with the certificate.
func handshakeReason(msg string) string {
	if i := strings.LastIndex(msg, "tls: "); i >= 0 {
		return msg[i:]
	}
	if i := strings.LastIndex(msg, "x509: "); i >= 0 {
		return msg[i:]
	}
	return msg
}
