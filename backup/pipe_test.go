package backup

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// What goes in comes out, in order, whatever the sizes of the writes and
// the reads, and the pipe holds no more buffers than its bound.
func TestPipeOrder(t *testing.T) {
	want := make([]byte, 5*pipeBuffer+12345)
	rand.NewChaCha8([32]byte{1}).Read(want)
	p := newPipe()
	go func() {
		r := rand.New(rand.NewPCG(1, 2))
		for b := want; len(b) > 0; {
			n := min(len(b), 1+r.IntN(3*pipeBuffer/2))
			if _, err := p.Write(b[:n]); err != nil {
				p.CloseWrite(err)
				return
			}
			b = b[n:]
		}
		p.CloseWrite(nil)
	}()
	var got bytes.Buffer
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 200<<10)
	for {
		n, err := p.Read(buf[:1+r.IntN(len(buf))])
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes that differ from the %d written", got.Len(), len(want))
	}
	if n := len(p.free); n > pipeDepth+2 {
		t.Errorf("%d free buffers, want at most %d", n, pipeDepth+2)
	}
}

// The writer's error reaches the reader after what was written before it;
// an abort ends a writer blocked on a full pipe and a reader on an empty
// one.
func TestPipeErrors(t *testing.T) {
	p := newPipe()
	p.Write([]byte("before"))
	p.CloseWrite(errors.New("source broke"))
	b, err := io.ReadAll(p)
	if string(b) != "before" || err == nil || err.Error() != "source broke" {
		t.Errorf("read %q, %v; want before, then the writer's error", b, err)
	}

	p = newPipe()
	wrote := make(chan error)
	go func() {
		_, err := p.Write(make([]byte, (pipeDepth+2)*pipeBuffer)) // more than the pipe holds
		wrote <- err
	}()
	p.Abort(errors.New("store failed"))
	if err := <-wrote; err == nil || err.Error() != "store failed" {
		t.Errorf("blocked write after an abort: %v, want the abort's error", err)
	}
	if _, err := p.Read(make([]byte, 10)); err == nil || err.Error() != "store failed" {
		t.Errorf("read after an abort: %v, want the abort's error", err)
	}
}
