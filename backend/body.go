package backend

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"hash"
	"io"
	"net/http"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// firstBodyBuffer is the buffer a body is read into first; it grows as
// bytes arrive, never ahead of them.
const firstBodyBuffer = 32 << 10

// readBody reads a request body of at most limit bytes; a larger one is a
// 413. When the request has a Content-MD5 header, the body must match it
// (else 400), and readBody returns the header's value. The buffer grows
// with what arrives, so a body costs what it carries, not what its
// Content-Length announces. Errors that are API errors already (a body
// that came too slowly, a server out of body budget; see bodyLimits) keep
// their code.
func readBody(r *http.Request, limit int64) (body []byte, contentMD5 string, err error) {
	if r.ContentLength > limit {
		return nil, "", api.Errorf(http.StatusRequestEntityTooLarge, "body of %d bytes is over the limit of %d bytes", r.ContentLength, limit)
	}
	contentMD5 = r.Header.Get("Content-MD5")
	var want []byte
	var h hash.Hash
	if contentMD5 != "" {
		want, err = base64.StdEncoding.DecodeString(contentMD5)
		if err != nil || len(want) != md5.Size {
			return nil, "", api.Errorf(http.StatusBadRequest, "Content-MD5 %q is not the base64 of an MD5 digest", contentMD5)
		}
		h = md5.New()
	}
	body, err = readGrowing(r.Body, limit, r.ContentLength, h)
	if err != nil {
		return nil, "", err
	}
	if want != nil {
		if got := h.Sum(nil); !bytes.Equal(got, want) {
			return nil, "", api.Errorf(http.StatusBadRequest, "Content-MD5 %s does not match the body (MD5 %s): the body was damaged in transit", contentMD5, base64.StdEncoding.EncodeToString(got))
		}
	}
	return body, contentMD5, nil
}

// readGrowing reads src to its end into a buffer that starts small and
// doubles when full, up to announced bytes when the length is known (n >=
// 0) or limit+1 when it is not, so that a body over limit is noticed
// without reading all of it. h, when set, hashes the bytes as they come.
func readGrowing(src io.Reader, limit, n int64, h hash.Hash) ([]byte, error) {
	most := limit + 1
	if n >= 0 {
		most = n
	}
	buf := make([]byte, 0, min(most, firstBodyBuffer))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= most {
				// Known length: only EOF may follow. Unknown: over limit.
				if n < 0 {
					return nil, api.Errorf(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes", limit)
				}
				var one [1]byte
				if k, _ := src.Read(one[:]); k > 0 {
					return nil, api.Errorf(http.StatusBadRequest, "body is longer than its Content-Length")
				}
				return buf, nil
			}
			grown := make([]byte, len(buf), min(2*int64(cap(buf))+firstBodyBuffer, most))
			copy(grown, buf)
			buf = grown
		}
		k, err := src.Read(buf[len(buf):cap(buf)])
		if h != nil && k > 0 {
			h.Write(buf[len(buf) : len(buf)+k])
		}
		buf = buf[:len(buf)+k]
		switch {
		case err == io.EOF:
			if n >= 0 && int64(len(buf)) != n {
				return nil, api.Errorf(http.StatusBadRequest, "read body: %d bytes of the %d its Content-Length announced", len(buf), n)
			}
			return buf, nil
		case err != nil:
			var ae *api.Error
			if errors.As(err, &ae) {
				return nil, ae
			}
			return nil, api.Errorf(http.StatusBadRequest, "read body: %v", err)
		}
	}
}
