package tofu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// pushErrored writes the state that an interrupted apply saved in
// errored.tfstate back to the state backend, so that what the apply created
// is known again, and removes the file.
//
// It does what `tofu state push` does, over the backend's own protocol:
// lock, read the stored state, refuse a saved state of another lineage or
// of a lower serial (the push is never forced), write, unlock. tofu itself
// cannot do it when state encryption is on: `tofu state push` reads its
// source file without decryption, and the file tofu saves is encrypted. The
// bytes are pushed as tofu saved them, encrypted or not. When the push is
// refused, the file stays for an operator to look at.
func (s *session) pushErrored(ctx context.Context) error {
	path := filepath.Join(s.dir, ErroredState)
	saved, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("push %s, the state an interrupted apply saved (the file stays): %s", path, fmt.Sprintf(format, args...))
	}
	serial, lineage := stateSerial(saved)
	if serial == nil || lineage == "" {
		return fail("it has no serial and lineage")
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] // a lock ID as tofu makes them
	info, err := json.Marshal(map[string]any{"ID": id, "Operation": "OperationTypeInvalid", "Info": "push " + ErroredState,
		"Who": "rezuscloud reconciler", "Created": time.Now().UTC()})
	if err != nil {
		return err
	}
	state := s.state()
	if err := state.Lock(ctx, info); err != nil {
		return fail("%v", err)
	}
	defer func() { _ = state.Unlock(context.WithoutCancel(ctx), info) }()
	current, err := state.Get(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if len(current) > 0 {
		curSerial, curLineage := stateSerial(current)
		if curLineage != "" && curLineage != lineage {
			return fail("it has lineage %s, the stored state %s: it belongs to another state", lineage, curLineage)
		}
		if curSerial != nil && *serial < *curSerial {
			return fail("it has serial %d, lower than the stored state's %d: the stored state is newer", *serial, *curSerial)
		}
	}
	if err := state.Post(ctx, id, saved); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(s.out, "rezuscloud: pushed %s (serial %d, lineage %s), the state an interrupted apply saved\n", ErroredState, *serial, lineage)
	return os.Remove(path)
}

// stateSerial reads serial and lineage from a state file, plain or
// encrypted (OpenTofu keeps both in clear text beside the ciphertext).
func stateSerial(raw []byte) (serial *uint64, lineage string) {
	var h struct {
		Serial  *uint64 `json:"serial"`
		Lineage string  `json:"lineage"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return nil, ""
	}
	return h.Serial, h.Lineage
}
