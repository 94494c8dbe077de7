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
	"github.com/rezuscloud/rezuscloud/store"
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
	store store.Store
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
func NewStateHandler(st store.Store, opts StateOptions) *StateHandler {
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
	return &StateHandler{store: st, opts: opts, log: log, now: time.Now}
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
		var meta *store.StateMeta
		err = h.store.View(func(tx store.Tx) (err error) {
			data, meta, _, err = tx.StateVersion(name, v)
			return err
		})
		if errors.Is(err, store.ErrNoState) {
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
	var meta *store.StateMeta
	err := h.store.View(func(tx store.Tx) (err error) {
		data, meta, err = tx.State(name)
		return err
	})
	if errors.Is(err, store.ErrNoState) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		h.internal(w, r, name, err)
		return
	}
	writeState(w, data, meta)
}

func writeState(w http.ResponseWriter, data []byte, meta *store.StateMeta) {
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
	serial, lineage, err := store.ParseState(body)
	if err != nil {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "POST %s%s: not a TF state, nothing stored: %v. A state is a JSON object with version, serial and lineage, or OpenTofu's encrypted state with serial and lineage in clear text", StatePrefix, name, err))
		return
	}
	var version uint64
	err = h.store.Update(func(tx store.Tx) (err error) {
		version, err = store.WriteState(tx, name, store.StateWrite{
			Data: body, Serial: serial, Lineage: lineage, MD5: sum,
			Token: id.Name, Admin: id.Role >= RoleAdmin, LockID: r.URL.Query().Get("ID"),
			Time: h.now().UTC(), Keep: h.opts.History,
		})
		return err
	})
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	h.log.Debug("state stored", "state", name, "version", version, "size", len(body), "token", id.Name)
	w.WriteHeader(http.StatusOK)
}

// guardMessage says why a POST was refused by a guard of
// store.WriteState, and what to do instead.
func guardMessage(e *store.GuardError) string {
	name, w := e.Name, e.Write
	switch e.Reason {
	case store.LockReleased:
		return fmt.Sprintf("state %q is not locked, but this POST carries lock ID %s: the lock was released (force-unlocked?) while the writer ran; pull the state and run again", name, w.LockID)
	case store.UnknownLineage:
		return fmt.Sprintf("state %q holds bytes that are not a TF state, so its lineage is unknown and this POST of lineage %s may belong to another state; an admin token may overwrite it, or DELETE %s%s first to replace it", name, w.Lineage, StatePrefix, name)
	case store.OtherLineage:
		return fmt.Sprintf("state %q has lineage %s, but this POST has lineage %s: it is a different state. Pull the current state, or DELETE %s%s first to replace it", name, e.Stored.Lineage, w.Lineage, StatePrefix, name)
	default:
		return fmt.Sprintf("state %q is at serial %d, but this POST has serial %d: a stale writer. Pull the current state and run again", name, *e.Stored.Serial, w.Serial)
	}
}

func (h *StateHandler) delete(w http.ResponseWriter, r *http.Request, name string) {
	id, ok := requireRole(w, r, RoleEdit, "deleting state")
	if !ok {
		return
	}
	err := h.store.Update(func(tx store.Tx) error {
		return store.RemoveState(tx, name, id.Name, r.URL.Query().Get("ID"))
	})
	if errors.Is(err, store.ErrNoState) {
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
	var info store.LockInfo
	if err := json.Unmarshal(body, &info); err != nil || info.ID == "" {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "LOCK %s%s: body must be a LockInfo JSON object with an ID", StatePrefix, name))
		return
	}
	var compact bytes.Buffer
	json.Compact(&compact, body)
	l := store.Lock{ID: info.ID, Token: id.Name, Created: h.now().UTC(), Info: compact.Bytes()}
	err = h.store.Update(func(tx store.Tx) error { return store.LockState(tx, name, l) })
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
	var info store.LockInfo
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &info); err != nil {
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "UNLOCK %s%s: body must be empty or a LockInfo JSON object", StatePrefix, name))
			return
		}
	}
	var released *store.Lock
	err = h.store.Update(func(tx store.Tx) (err error) {
		released, err = store.UnlockState(tx, name, info.ID, id.Name, id.Role >= RoleAdmin)
		return err
	})
	if err != nil {
		h.writeErr(w, r, name, err)
		return
	}
	if released.Token != id.Name || info.ID == "" {
		h.log.Warn("state force-unlocked", "state", name, "lock", released.ID, "holder", released.Token,
			"locked_at", released.Created, "by", id.Name, "by_role", id.Role.String(), "lock_id_given", info.ID != "", "remote", r.RemoteAddr)
		if h.opts.Audit != nil {
			h.opts.Audit.Warn("state force-unlocked", append(id.Who(), "role", id.Role.String(), "what", "force-unlock",
				"tenant", name, "at", h.now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr,
				"lock", released.ID, "holder", released.Token, "locked_at", released.Created, "lock_id_given", info.ID != "")...)
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
	err := h.store.View(func(tx store.Tx) error {
		versions, err := tx.StateVersions(name)
		if err != nil {
			return err
		}
		l, err := tx.Lock(name)
		if err != nil {
			return err
		}
		if len(versions) == 0 && l == nil {
			return store.ErrNoState
		}
		list.Items = make([]api.StateVersion, 0, len(versions))
		for _, v := range versions {
			list.Items = append(list.Items, versionView(v))
		}
		list.Total = len(versions)
		if l != nil {
			list.Lock = lockView(l, h.opts.StaleLockAge, h.now())
		}
		return nil
	})
	if errors.Is(err, store.ErrNoState) {
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
	var le *store.LockedError
	if errors.As(err, &le) {
		if age := h.now().Sub(le.Lock.Created); h.opts.StaleLockAge > 0 && age > h.opts.StaleLockAge {
			h.log.Warn("state lock conflict with a stale lock; an admin token can force-unlock it", "state", name, "method", r.Method,
				"lock", le.Lock.ID, "holder", le.Lock.Token, "age", age.Round(time.Second), "detail", le.Error())
		} else {
			h.log.Info("state lock conflict", "state", name, "method", r.Method, "detail", le.Error())
		}
		body := holderInfo(le.Lock)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusLocked)
		w.Write(body)
		return
	}
	if ae := stateAPIError(name, err); ae != nil {
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

// stateAPIError maps the errors of the store's state and lock rules
// besides a held lock to their API errors; nil for any other error.
func stateAPIError(name string, err error) *api.Error {
	var ge *store.GuardError
	var fe *store.ForceUnlockError
	var ae *api.Error
	switch {
	case errors.As(err, &ge):
		return api.Errorf(http.StatusConflict, "%s", guardMessage(ge))
	case errors.As(err, &fe) && fe.NoID:
		return api.Errorf(http.StatusForbidden, "state %q is locked by token %q (lock ID %s); an UNLOCK without the lock ID (terraform force-unlock sends none) is a force-unlock, which needs an admin token", fe.Name, fe.Lock.Token, fe.Lock.ID)
	case errors.As(err, &fe):
		return api.Errorf(http.StatusForbidden, "state %q is locked by token %q (lock ID %s); releasing another token's lock is a force-unlock, which needs an admin token", fe.Name, fe.Lock.Token, fe.Lock.ID)
	case errors.Is(err, store.ErrNotLocked):
		return api.Errorf(http.StatusConflict, "state %q is not locked", name)
	case errors.As(err, &ae):
		return ae
	}
	return nil
}

// versionView is the API view of a kept state version.
func versionView(v store.StateVersion) api.StateVersion {
	sv := api.StateVersion{
		Version: v.Version,
		Current: v.Current,
		Serial:  v.Serial,
		Lineage: v.Lineage,
		Size:    v.Size,
		MD5:     v.MD5,
		Time:    v.Time,
		Token:   v.Token,
	}
	if v.Lock != nil {
		sv.LockHolder = lockView(v.Lock, 0, v.Time)
	}
	return sv
}
