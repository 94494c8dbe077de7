package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Defaults of StateOptions.
const (
	DefaultMaxStateBytes = 64 << 20
	DefaultStateHistory  = 50
	DefaultStaleLockAge  = time.Hour
)

// maxLockBody bounds LOCK and UNLOCK bodies, which hold a small LockInfo.
const maxLockBody = 1 << 20

// StateOptions configures a StateHandler. The zero value selects the
// defaults.
type StateOptions struct {
	// MaxBytes is the largest state a POST may send; larger ones get 413.
	// Default 64 MiB.
	MaxBytes int64
	// History is how many earlier versions of each state are kept besides
	// the current one. 0 selects the default of 50; a negative value keeps
	// none.
	History int
	// StaleLockAge is the age after which a lock is reported as stale in
	// the versions listing. Stale locks are never broken by the server.
	// Default 1h; negative turns the report off.
	StaleLockAge time.Duration
	// Logger receives lock, force-unlock and error events. Default: none.
	Logger *slog.Logger
	// Audit, when set, receives one record per force-unlock: who forced
	// it, whose lock it was, and when. Server.SetAudit sets it.
	Audit *slog.Logger
}

// StateHandler serves the Terraform HTTP state backend protocol on
// /tfstate/{name} (GET, POST, DELETE, LOCK, UNLOCK) and the versions
// listing on /api/v1/tfstate/{name}/versions. It expects Authenticate in
// front of it.
type StateHandler struct {
	store *Store
	opts  StateOptions
	log   *slog.Logger
	now   func() time.Time
}

// Route prefixes StateHandler serves.
const (
	StatePrefix    = "/tfstate/"
	VersionsPrefix = "/api/v1/tfstate/"
)

// NewStateHandler returns the state backend over store.
func NewStateHandler(store *Store, opts StateOptions) *StateHandler {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxStateBytes
	}
	switch {
	case opts.History == 0:
		opts.History = DefaultStateHistory
	case opts.History < 0:
		opts.History = 0
	}
	switch {
	case opts.StaleLockAge == 0:
		opts.StaleLockAge = DefaultStaleLockAge
	case opts.StaleLockAge < 0:
		opts.StaleLockAge = 0
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StateHandler{store: store, opts: opts, log: log, now: time.Now}
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckStateName reports whether name is a DNS-1123 label, the form of
// every state name.
func CheckStateName(name string) error {
	if len(name) > 63 || !labelRE.MatchString(name) {
		return fmt.Errorf("state name %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)", name)
	}
	return nil
}

func (h *StateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, VersionsPrefix):
		name, ok := strings.CutSuffix(strings.TrimPrefix(path, VersionsPrefix), "/versions")
		if !ok {
			api.WriteError(w, api.Errorf(http.StatusNotFound, "no such resource %s: the state API serves %s{name}/versions", path, VersionsPrefix))
			return
		}
		if err := CheckStateName(name); err != nil {
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "%v", err))
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: this listing is read-only; use GET", r.Method, path))
			return
		}
		h.versions(w, r, name)
		return
	case strings.HasPrefix(path, StatePrefix):
	default:
		api.WriteError(w, api.Errorf(http.StatusNotFound, "no such resource %s", path))
		return
	}
	name := strings.TrimPrefix(path, StatePrefix)
	if err := CheckStateName(name); err != nil {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "%v", err))
		return
	}
	switch r.Method {
	case http.MethodGet:
		h.get(w, r, name)
	case http.MethodPost:
		h.post(w, r, name)
	case http.MethodDelete:
		h.delete(w, r, name)
	case "LOCK":
		h.lock(w, r, name)
	case "UNLOCK":
		h.unlock(w, r, name)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE, LOCK, UNLOCK")
		api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s is not a state backend method; use GET, POST, DELETE, LOCK or UNLOCK", r.Method))
	}
}

func (h *StateHandler) get(w http.ResponseWriter, r *http.Request, name string) {
	if q := r.URL.Query(); q.Has("version") {
		if _, ok := requireRole(w, r, RoleAdmin, "reading an earlier state version"); !ok {
			return
		}
		v, err := strconv.ParseUint(q.Get("version"), 10, 64)
		if err != nil || v == 0 {
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "version %q: want a version number from %s%s/versions", q.Get("version"), VersionsPrefix, name))
			return
		}
		var data []byte
		var meta *stateMeta
		err = h.store.View(func(tx *Tx) (err error) {
			data, meta, _, err = tx.stateVersion(name, v)
			return err
		})
		if errors.Is(err, errNoState) {
			api.WriteError(w, api.Errorf(http.StatusNotFound, "state %q has no version %d; %s%s/versions lists the kept ones", name, v, VersionsPrefix, name))
			return
		}
		if err != nil {
			h.internal(w, r, name, err)
			return
		}
		writeState(w, data, meta)
		return
	}
	if _, ok := requireRole(w, r, RoleEdit, "reading a TF state, which holds the tenant's secrets,"); !ok {
		return
	}
	var data []byte
	var meta *stateMeta
	err := h.store.View(func(tx *Tx) (err error) {
		data, meta, err = tx.currentState(name)
		return err
	})
	if errors.Is(err, errNoState) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		h.internal(w, r, name, err)
		return
	}
	writeState(w, data, meta)
}

func writeState(w http.ResponseWriter, data []byte, meta *stateMeta) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	if meta != nil && meta.MD5 != "" {
		w.Header().Set("Content-MD5", meta.MD5)
	}
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

func (h *StateHandler) post(w http.ResponseWriter, r *http.Request, name string) {
	id, ok := requireRole(w, r, RoleEdit, "writing state")
	if !ok {
		return
	}
	body, sum, err := readBody(r, h.opts.MaxBytes)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	if len(body) == 0 {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "POST %s%s: empty body; DELETE removes a state", StatePrefix, name))
		return
	}
	serial, lineage, err := parseState(body)
	if err != nil {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "POST %s%s: not a TF state, nothing stored: %v. A state is a JSON object with version, serial and lineage, or OpenTofu's encrypted state with serial and lineage in clear text", StatePrefix, name, err))
		return
	}
	lockID := r.URL.Query().Get("ID")
	now := h.now().UTC()
	var version uint64
	err = h.store.Update(func(tx *Tx) error {
		l, err := tx.lock(name)
		if err != nil {
			return err
		}
		switch {
		case l != nil && lockID != l.ID:
			why := "this POST carries no lock ID"
			if lockID != "" {
				why = fmt.Sprintf("this POST carries lock ID %s", lockID)
			}
			return &lockedError{name: name, lock: l, why: why}
		case l != nil && id.Name != l.Token && id.Role < RoleAdmin:
			return &lockedError{name: name, lock: l, why: fmt.Sprintf("the lock ID matches but token %q did not take the lock", id.Name)}
		case l == nil && lockID != "":
			return api.Errorf(http.StatusConflict, "state %q is not locked, but this POST carries lock ID %s: the lock was released (force-unlocked?) while the writer ran; pull the state and run again", name, lockID)
		}
		if err := checkGuards(tx, name, id, serial, lineage); err != nil {
			return err
		}
		meta := &stateMeta{
			Serial: &serial, Lineage: lineage, Size: int64(len(body)), MD5: sum,
			Time: now, Token: id.Name, Lock: l,
		}
		version, err = tx.putState(name, body, meta, h.opts.History)
		return err
	})
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	h.log.Debug("state stored", "state", name, "version", version, "size", len(body), "token", id.Name)
	w.WriteHeader(http.StatusOK)
}

// checkGuards refuses a POST of serial and lineage that would replace a
// different state (another lineage) or a newer one (a higher serial). The
// guards compare with the newest kept version that has a lineage (see
// Tx.guardMeta). When the current version's lineage is unknown, because
// an older server stored bytes that are not a state, only an admin token
// may overwrite it; anyone may after a DELETE.
func checkGuards(tx *Tx, name string, id Identity, serial uint64, lineage string) error {
	ref, err := tx.guardMeta(name)
	switch {
	case errors.Is(err, errNoState):
		return nil
	case err != nil:
		return err
	case ref == nil && id.Role >= RoleAdmin:
		return nil
	case ref == nil:
		return api.Errorf(http.StatusConflict, "state %q holds bytes that are not a TF state, so its lineage is unknown and this POST of lineage %s may belong to another state; an admin token may overwrite it, or DELETE %s%s first to replace it", name, lineage, StatePrefix, name)
	case ref.Lineage != lineage:
		return api.Errorf(http.StatusConflict, "state %q has lineage %s, but this POST has lineage %s: it is a different state. Pull the current state, or DELETE %s%s first to replace it", name, ref.Lineage, lineage, StatePrefix, name)
	case ref.Serial != nil && serial < *ref.Serial:
		return api.Errorf(http.StatusConflict, "state %q is at serial %d, but this POST has serial %d: a stale writer. Pull the current state and run again", name, *ref.Serial, serial)
	}
	return nil
}

func (h *StateHandler) delete(w http.ResponseWriter, r *http.Request, name string) {
	id, ok := requireRole(w, r, RoleEdit, "deleting state")
	if !ok {
		return
	}
	lockID := r.URL.Query().Get("ID")
	err := h.store.Update(func(tx *Tx) error {
		l, err := tx.lock(name)
		if err != nil {
			return err
		}
		if l != nil && (l.Token != id.Name || (lockID != "" && lockID != l.ID)) {
			return &lockedError{name: name, lock: l, why: "only the token that holds the lock may delete the state"}
		}
		return tx.deleteState(name)
	})
	if errors.Is(err, errNoState) {
		api.WriteError(w, api.Errorf(http.StatusNotFound, "state %q has no current version to delete", name))
		return
	}
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	h.log.Info("state deleted", "state", name, "token", id.Name)
	w.WriteHeader(http.StatusOK)
}

func (h *StateHandler) lock(w http.ResponseWriter, r *http.Request, name string) {
	id, ok := requireRole(w, r, RoleEdit, "locking state")
	if !ok {
		return
	}
	body, _, err := readBody(r, maxLockBody)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	var info lockInfo
	if err := json.Unmarshal(body, &info); err != nil || info.ID == "" {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "LOCK %s%s: body must be a LockInfo JSON object with an ID", StatePrefix, name))
		return
	}
	var compact bytes.Buffer
	json.Compact(&compact, body)
	now := h.now().UTC()
	err = h.store.Update(func(tx *Tx) error {
		l, err := tx.lock(name)
		if err != nil {
			return err
		}
		if l != nil {
			if l.ID == info.ID && l.Token == id.Name {
				return nil
			}
			return &lockedError{name: name, lock: l, why: "already locked"}
		}
		return tx.putLock(name, &lockRecord{ID: info.ID, Token: id.Name, Created: now, Info: compact.Bytes()})
	})
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	h.log.Info("state locked", "state", name, "lock", info.ID, "operation", info.Operation, "token", id.Name)
	w.WriteHeader(http.StatusOK)
}

func (h *StateHandler) unlock(w http.ResponseWriter, r *http.Request, name string) {
	id, ok := requireRole(w, r, RoleEdit, "unlocking state")
	if !ok {
		return
	}
	body, _, err := readBody(r, maxLockBody)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	var info lockInfo
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &info); err != nil {
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "UNLOCK %s%s: body must be empty or a LockInfo JSON object", StatePrefix, name))
			return
		}
	}
	var released *lockRecord
	err = h.store.Update(func(tx *Tx) error {
		l, err := tx.lock(name)
		if err != nil {
			return err
		}
		if l == nil {
			return api.Errorf(http.StatusConflict, "state %q is not locked", name)
		}
		if info.ID != "" && info.ID != l.ID {
			return &lockedError{name: name, lock: l, why: fmt.Sprintf("UNLOCK names lock ID %s", info.ID)}
		}
		if info.ID == "" && id.Role < RoleAdmin {
			return api.Errorf(http.StatusForbidden, "state %q is locked by token %q (lock ID %s); an UNLOCK without the lock ID (terraform force-unlock sends none) is a force-unlock, which needs an admin token", name, l.Token, l.ID)
		}
		if l.Token != id.Name && id.Role < RoleAdmin {
			return api.Errorf(http.StatusForbidden, "state %q is locked by token %q (lock ID %s); releasing another token's lock is a force-unlock, which needs an admin token", name, l.Token, l.ID)
		}
		released = l
		return tx.deleteLock(name)
	})
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	if released.Token != id.Name || info.ID == "" {
		h.log.Warn("state force-unlocked", "state", name, "lock", released.ID, "holder", released.Token,
			"locked_at", released.Created, "by", id.Name, "by_role", id.Role.String(), "lock_id_given", info.ID != "", "remote", r.RemoteAddr)
		if h.opts.Audit != nil {
			h.opts.Audit.Warn("state force-unlocked", "who", id.Name, "role", id.Role.String(), "what", "force-unlock",
				"tenant", name, "at", h.now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr,
				"lock", released.ID, "holder", released.Token, "locked_at", released.Created, "lock_id_given", info.ID != "")
		}
	} else {
		h.log.Info("state unlocked", "state", name, "lock", released.ID, "token", id.Name)
	}
	w.WriteHeader(http.StatusOK)
}

func (h *StateHandler) versions(w http.ResponseWriter, r *http.Request, name string) {
	if _, ok := requireRole(w, r, RoleView, "listing state versions"); !ok {
		return
	}
	var list api.StateVersionList
	err := h.store.View(func(tx *Tx) error {
		items, err := tx.stateVersions(name)
		if err != nil {
			return err
		}
		l, err := tx.lock(name)
		if err != nil {
			return err
		}
		if items == nil && l == nil {
			return errNoState
		}
		list.Items = items
		if list.Items == nil {
			list.Items = []api.StateVersion{}
		}
		list.Total = len(items)
		if l != nil {
			list.Lock = l.view(h.opts.StaleLockAge, h.now())
		}
		return nil
	})
	if errors.Is(err, errNoState) {
		api.WriteError(w, api.Errorf(http.StatusNotFound, "no state %q", name))
		return
	}
	if err != nil {
		h.internal(w, r, name, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}

// writeErr answers a state operation's error: 423 with the holder's
// LockInfo for a held lock, the API error's own code, or 500.
func (h *StateHandler) writeErr(w http.ResponseWriter, r *http.Request, name string, err error) {
	var le *lockedError
	if errors.As(err, &le) {
		if age := h.now().Sub(le.lock.Created); h.opts.StaleLockAge > 0 && age > h.opts.StaleLockAge {
			h.log.Warn("state lock conflict with a stale lock; an admin token can force-unlock it", "state", name, "method", r.Method,
				"lock", le.lock.ID, "holder", le.lock.Token, "age", age.Round(time.Second), "detail", le.Error())
		} else {
			h.log.Info("state lock conflict", "state", name, "method", r.Method, "detail", le.Error())
		}
		body := le.lock.holderInfo()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusLocked)
		w.Write(body)
		return
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		if ae.Code == http.StatusConflict {
			h.log.Warn("state request refused", "state", name, "method", r.Method, "reason", ae.Message)
		}
		api.WriteError(w, ae)
		return
	}
	h.internal(w, r, name, err)
}

func (h *StateHandler) internal(w http.ResponseWriter, r *http.Request, name string, err error) {
	h.log.Error("state request failed", "state", name, "method", r.Method, "err", err)
	api.WriteError(w, err)
}
