// Package machinelog is the port between the API's log endpoints and
// what reads the logs of a tenant's machines: what a client asks
// (Request), the stream it gets (Stream), and the errors that say why a
// machine did not serve it. backend declares the interface that opens a
// stream (backend.MachineLogs) and answers these errors with their HTTP
// codes; the reconciler's Talos plane implements it with these types, so
// that neither imports the other. It holds no logic and imports nothing
// of the project.
package machinelog

import "errors"

// Request is what a client asked of a machine's logs.
type Request struct {
	// Dmesg asks for the kernel log instead of a service's.
	Dmesg bool
	// Service names the service (apid, etcd, kubelet, machined, ...);
	// empty for Dmesg.
	Service string
	// Follow keeps the stream open for new lines.
	Follow bool
	// TailLines is how many of the last lines to send first.
	TailLines int
}

// Stream is one open log stream.
type Stream interface {
	// Next returns the next chunk of text: whole lines, except perhaps
	// for a very long one. It returns io.EOF when the stream is over.
	Next() ([]byte, error)
	// Close ends the stream and frees what it holds.
	Close() error
}

// Errors an opener of streams wraps; their messages reach the client, so
// they must not hold secrets.
var (
	// ErrUnreachable: the machine refused the connection, or did not
	// accept the tenant's credentials.
	ErrUnreachable = errors.New("the machine's Talos API does not answer")
	// ErrTimeout: the machine did not answer in time.
	ErrTimeout = errors.New("the machine's Talos API did not answer in time")
	// ErrBadRequest: the machine refused the request itself, such as a
	// service it does not have.
	ErrBadRequest = errors.New("the machine refused the log request")
)
