package backup

import (
	"io"
	"sync"
)

// pipe connects the encryption of a part (the writer) with the store's Put
// (the reader), as io.Pipe does, but with a few buffers between them: the
// writer goes on hashing and encrypting while the store writes or sends
// the bytes before, up to depth buffers ahead. Write and CloseWrite belong
// to one goroutine, Read to another; Abort may come from any.
type pipe struct {
	size  int
	full  chan []byte // filled buffers, in order; closed by CloseWrite
	free  chan []byte // buffers the reader is done with
	wbuf  []byte      // the writer's buffer being filled
	werr  error       // the writer's end: io.EOF or its error; set before full is closed
	rbuf  []byte      // the reader's unread rest of its buffer
	rcur  []byte      // the reader's whole buffer, to be freed
	stop  chan struct{}
	once  sync.Once
	abort error // why stop was closed
}

// Bounds of the memory of a pipe: at most depth+2 buffers of pipeBuffer
// bytes (depth queued, one filling, one being read) and the free ones.
const (
	pipeBuffer = 256 << 10
	pipeDepth  = 4
)

func newPipe() *pipe {
	return &pipe{
		size: pipeBuffer,
		full: make(chan []byte, pipeDepth),
		free: make(chan []byte, pipeDepth+2),
		stop: make(chan struct{}),
	}
}

// Abort ends both sides with err: the reader's next Read and the writer's
// next Write return it. The first Abort's error stays.
func (p *pipe) Abort(err error) {
	p.once.Do(func() {
		p.abort = err
		close(p.stop)
	})
}

func (p *pipe) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if p.wbuf == nil {
			select {
			case buf := <-p.free:
				p.wbuf = buf[:0]
			default:
				p.wbuf = make([]byte, 0, p.size)
			}
		}
		c := copy(p.wbuf[len(p.wbuf):cap(p.wbuf)], b)
		p.wbuf = p.wbuf[:len(p.wbuf)+c]
		b, n = b[c:], n+c
		if len(p.wbuf) == cap(p.wbuf) {
			if err := p.send(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (p *pipe) send() error {
	select {
	case p.full <- p.wbuf:
		p.wbuf = nil
		return nil
	case <-p.stop:
		return p.abort
	}
}

// CloseWrite ends the writer's side: with err == nil the reader reads what
// is buffered and then io.EOF, else what is buffered and then err.
func (p *pipe) CloseWrite(err error) {
	if len(p.wbuf) > 0 {
		if serr := p.send(); err == nil {
			err = serr
		}
	}
	if err == nil {
		err = io.EOF
	}
	p.werr = err
	close(p.full)
}

func (p *pipe) Read(b []byte) (int, error) {
	for len(p.rbuf) == 0 {
		if p.rcur != nil {
			p.free <- p.rcur // never blocks: free holds every buffer there is
			p.rcur = nil
		}
		select {
		case buf, ok := <-p.full:
			if !ok {
				return 0, p.werr
			}
			p.rbuf, p.rcur = buf, buf
		case <-p.stop:
			return 0, p.abort
		}
	}
	select {
	case <-p.stop:
		return 0, p.abort
	default:
	}
	n := copy(b, p.rbuf)
	p.rbuf = p.rbuf[n:]
	return n, nil
}
