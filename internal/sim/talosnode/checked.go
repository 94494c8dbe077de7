package talosnode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/gendata"
)

// checkedFile keeps, in the sim dir, the outcome of every config the host
// loaded and validated (its summary, or Talos's error), one JSON line per
// config and mode after a header naming the Talos machinery that checked
// them. A host opened again boots its machines from it without parsing
// their configs: 8,000 machines share about 2,000 configs, and parsing
// them took most of the time of opening such a sim dir. Its header is
// checked at open; another machinery version, or a file that cannot be
// read, starts a new file.
const checkedFile = "talos-checked.jsonl"

// maxCheckedLines bounds the file: one longer is started anew at open.
const maxCheckedLines = 8192

// checkedHeader is the first line of the file. Talos is the version of
// the machinery that validated the configs.
type checkedHeader struct {
	Format int    `json:"format"`
	Talos  string `json:"talos"`
}

type checkedLine struct {
	Key     string  `json:"key"`
	Summary summary `json:"summary,omitzero"`
	Error   string  `json:"error,omitempty"`
}

// checkedSelf is the header this build writes: Format changes with
// summary and check, Talos with the machinery that validates.
var checkedSelf = checkedHeader{Format: 1, Talos: gendata.VersionTag}

// loadChecked reads the checked configs of the sim dir into h.checked and
// opens the file for appending. A file of another header or one that
// cannot be read is replaced; the host works without the file when it
// cannot write it.
func (h *Host) loadChecked() {
	path := filepath.Join(h.opts.Dir, checkedFile)
	entries, err := readChecked(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.log.Warn("start the file of checked configs anew", "path", path, "err", err)
	}
	flag := os.O_WRONLY | os.O_APPEND
	if entries == nil {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		h.log.Warn("keep checked configs", "path", path, "err", err)
		return
	}
	if entries == nil {
		b, _ := json.Marshal(checkedSelf)
		if _, err := f.Write(append(b, '\n')); err != nil {
			f.Close()
			h.log.Warn("keep checked configs", "path", path, "err", err)
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		h.checked[e.Key] = checkedConfig{sum: e.Summary, err: errorOf(e.Error)}
	}
	h.checkedOut = f
}

// readChecked returns the entries of the file at path, nil when its
// header is not this build's.
func readChecked(path string) ([]checkedLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var out []checkedLine
	for line := 1; sc.Scan(); line++ {
		if line == 1 {
			var hd checkedHeader
			if err := json.Unmarshal(sc.Bytes(), &hd); err != nil {
				return nil, fmt.Errorf("line 1: %w", err)
			}
			if hd != checkedSelf {
				return nil, fmt.Errorf("checked by %+v, not %+v", hd, checkedSelf)
			}
			continue
		}
		var e checkedLine
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Key == "" {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) > maxCheckedLines {
		return nil, fmt.Errorf("%d lines, more than %d", len(out), maxCheckedLines)
	}
	if out == nil {
		out = []checkedLine{}
	}
	return out, nil
}

// keepChecked appends the outcome of a check to the file. Called with
// h.mu held.
func (h *Host) keepChecked(key string, c checkedConfig) {
	if h.checkedOut == nil {
		return
	}
	e := checkedLine{Key: key, Summary: c.sum}
	if c.err != nil {
		e.Error = c.err.Error()
	}
	b, _ := json.Marshal(e)
	if _, err := h.checkedOut.Write(append(b, '\n')); err != nil {
		h.log.Warn("keep a checked config", "err", err)
		h.checkedOut.Close()
		h.checkedOut = nil
	}
}

func errorOf(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}
