package backend

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"io"
	"net/http"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// readChunk bounds each read of a body whose length is known, so that
// hashing can follow the reading closely.
const readChunk = 256 << 10

// readBody reads a request body of at most limit bytes; a larger one is a
// 413. When the request has a Content-MD5 header, the body must match it
// (else 400), and readBody returns the header's value.
func readBody(r *http.Request, limit int64) (body []byte, contentMD5 string, err error) {
	if r.ContentLength > limit {
		return nil, "", api.Errorf(http.StatusRequestEntityTooLarge, "body of %d bytes is over the limit of %d bytes", r.ContentLength, limit)
	}
	contentMD5 = r.Header.Get("Content-MD5")
	var want []byte
	if contentMD5 != "" {
		want, err = base64.StdEncoding.DecodeString(contentMD5)
		if err != nil || len(want) != md5.Size {
			return nil, "", api.Errorf(http.StatusBadRequest, "Content-MD5 %q is not the base64 of an MD5 digest", contentMD5)
		}
	}
	var got []byte
	if r.ContentLength >= 0 {
		body, got, err = readKnownLength(r.Body, r.ContentLength, want != nil)
	} else {
		body, err = readUnknownLength(r.Body, limit)
		if err == nil && want != nil {
			sum := md5.Sum(body)
			got = sum[:]
		}
	}
	if err != nil {
		return nil, "", err
	}
	if want != nil && !bytes.Equal(got, want) {
		return nil, "", api.Errorf(http.StatusBadRequest, "Content-MD5 %s does not match the body (MD5 %s): the body was damaged in transit", contentMD5, base64.StdEncoding.EncodeToString(got))
	}
	return body, contentMD5, nil
}

// readKnownLength reads exactly n bytes into one buffer of that size and
// makes sure nothing follows. With withMD5 it hashes the body on another
// goroutine while the rest is still arriving, so a large POST costs little
// more than the slower of reading and hashing.
func readKnownLength(src io.Reader, n int64, withMD5 bool) ([]byte, []byte, error) {
	body := make([]byte, n)
	var chunks chan []byte
	var sum chan []byte
	if withMD5 {
		chunks, sum = make(chan []byte, 64), make(chan []byte, 1)
		go func() {
			h := md5.New()
			for c := range chunks {
				h.Write(c)
			}
			sum <- h.Sum(nil)
		}()
	}
	var err error
	for off := 0; off < len(body) && err == nil; {
		end := min(off+readChunk, len(body))
		var k int
		k, err = io.ReadFull(src, body[off:end])
		if withMD5 && k > 0 {
			chunks <- body[off : off+k]
		}
		off += k
	}
	var got []byte
	if withMD5 {
		close(chunks)
		got = <-sum
	}
	if err != nil {
		return nil, nil, api.Errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if k, _ := src.Read(make([]byte, 1)); k > 0 {
		return nil, nil, api.Errorf(http.StatusBadRequest, "body is longer than its Content-Length")
	}
	return body, got, nil
}

// readUnknownLength reads a body sent without Content-Length.
func readUnknownLength(src io.Reader, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(src, limit+1)); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if int64(buf.Len()) > limit {
		return nil, api.Errorf(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes", limit)
	}
	return buf.Bytes(), nil
}
