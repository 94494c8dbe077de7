package openstack

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultAddresses is the block fixed IPs come from unless Options say
// otherwise. The simulated cloud of the rezussim provider never uses it.
var DefaultAddresses = netip.MustParsePrefix("127.2.0.0/16")

// Credentials are what Keystone accepts. Empty fields accept anything.
type Credentials struct {
	Username    string
	Password    string
	ProjectName string
	// Domain names the user's and the project's domain ("Default" when
	// empty); it is not checked.
	Domain string
	Region string // the catalog's region; "RegionOne" when empty
}

// Options configure a simulated cloud.
type Options struct {
	// Dir holds the cloud's state (state.json), journal.log and, when a
	// test drops one, faults.json. Required; created 0700.
	Dir string
	// Addresses is the block fixed IPs come from; it must lie in
	// 127.0.0.0/8. DefaultAddresses when zero.
	Addresses netip.Prefix
	// Credentials are the only ones Keystone accepts.
	Credentials Credentials
	// Catalog lists the flavors, images, networks and security groups;
	// DefaultCatalog() when nil.
	Catalog *Catalog
	// Hook hears of servers that boot and that are deleted; nil for none.
	Hook Hook
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Latency is how long every request waits before it is served, as
	// the API of a distant or busy cloud makes its callers wait; 0: none.
	Latency time.Duration
}

// Event says what happened to a server.
type Event int

// Server events.
const (
	// ServerCreated: a server was created and is ACTIVE; it boots with
	// the user data given.
	ServerCreated Event = iota + 1
	// ServerDeleted: a server that booted was deleted.
	ServerDeleted
	// ServerRestored: the cloud restarted and found this server, which
	// had booted, in its directory. Its user data is not kept, so it is
	// nil: a machine simulation keeps its own copy.
	ServerRestored
)

func (e Event) String() string {
	switch e {
	case ServerCreated:
		return "created"
	case ServerDeleted:
		return "deleted"
	case ServerRestored:
		return "restored"
	}
	return fmt.Sprintf("Event(%d)", int(e))
}

// Hook is told about servers that boot and go away. It is called without
// the cloud's lock held, after the state change is on disk, and before the
// API answers the request that caused it.
type Hook interface {
	OnServer(ev Event, id string, addr netip.Addr, userData []byte)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ev Event, id string, addr netip.Addr, userData []byte)

// OnServer implements Hook.
func (f HookFunc) OnServer(ev Event, id string, addr netip.Addr, userData []byte) {
	f(ev, id, addr, userData)
}

// Server is a server as a ServerHook hears of it: a Hook's arguments and
// the server's flavor (zero for a deleted server).
type Server struct {
	ID       string
	Addr     netip.Addr
	UserData []byte
	Flavor   Flavor
}

// ServerHook is a Hook that wants the whole server: the cloud calls
// OnServerEvent instead of OnServer on a Hook that implements it.
type ServerHook interface {
	OnServerEvent(ev Event, s Server)
}

// ServerHookFunc adapts a function to Hook and ServerHook.
type ServerHookFunc func(ev Event, s Server)

// OnServer implements Hook.
func (f ServerHookFunc) OnServer(ev Event, id string, addr netip.Addr, userData []byte) {
	f(ev, Server{ID: id, Addr: addr, UserData: userData})
}

// OnServerEvent implements ServerHook.
func (f ServerHookFunc) OnServerEvent(ev Event, s Server) { f(ev, s) }

// tell tells the hook, if any, what happened to a server of a flavor.
func (c *Cloud) tell(ev Event, id string, addr netip.Addr, userData []byte, flavorID string) {
	switch hook := c.opts.Hook.(type) {
	case nil:
	case ServerHook:
		s := Server{ID: id, Addr: addr, UserData: userData}
		if f := c.catalog.flavor(flavorID); f != nil {
			s.Flavor = *f
		}
		hook.OnServerEvent(ev, s)
	default:
		hook.OnServer(ev, id, addr, userData)
	}
}

// Request is one journaled API request.
type Request struct {
	Method string
	Path   string // without the query
	Query  string
	Status int
}

func (r Request) String() string { return fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status) }

// Cloud is a simulated OpenStack cloud. It is an http.Handler; Serve runs
// it on a loopback listener.
type Cloud struct {
	opts    Options
	catalog *Catalog

	mu      sync.Mutex
	st      *state
	tokens  map[string]bool
	journal []Request
	faults  []Fault
	builds  []string // statuses of the next servers created
	jfile   *os.File

	srv *http.Server
	url string
}

// Open loads the cloud's state from opts.Dir, or starts an empty one, and
// tells the hook about every server that had booted.
func Open(opts Options) (*Cloud, error) {
	if opts.Dir == "" {
		return nil, errors.New("simulated OpenStack: no directory given")
	}
	if !opts.Addresses.IsValid() {
		opts.Addresses = DefaultAddresses
	}
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	if !opts.Addresses.Addr().Is4() || opts.Addresses.Bits() < 8 || !loopback.Contains(opts.Addresses.Addr()) || opts.Addresses.Bits() > 30 {
		return nil, fmt.Errorf("simulated OpenStack: address block %s is not a block of 127.0.0.0/8 with room for hosts", opts.Addresses)
	}
	opts.Addresses = opts.Addresses.Masked()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Credentials.Region == "" {
		opts.Credentials.Region = "RegionOne"
	}
	c := &Cloud{opts: opts, catalog: DefaultCatalog(), tokens: map[string]bool{}}
	if opts.Catalog != nil {
		cat := *opts.Catalog
		cat.Flavors = append([]Flavor(nil), cat.Flavors...)
		cat.Images = append([]Image(nil), cat.Images...)
		cat.Networks = append([]Network(nil), cat.Networks...)
		cat.SecurityGroups = append([]SecurityGroup(nil), cat.SecurityGroups...)
		c.catalog = &cat
	}
	c.catalog.fill()
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("simulated OpenStack: %w", err)
	}
	st, err := loadState(filepath.Join(opts.Dir, stateFile))
	if err != nil {
		return nil, err
	}
	c.st = st
	c.jfile, err = os.OpenFile(filepath.Join(opts.Dir, journalFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("simulated OpenStack: journal: %w", err)
	}
	for _, s := range st.sortedServers() {
		if s.Booted {
			c.tell(ServerRestored, s.ID, s.address(), nil, s.FlavorID)
		}
	}
	return c, nil
}

// Serve listens on addr (a loopback address such as "127.0.0.1:0") and
// serves the API in the background. URL then gives its base URL.
func (c *Cloud) Serve(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("simulated OpenStack: listen %s: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return fmt.Errorf("simulated OpenStack: listen %s: only loopback addresses are allowed", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("simulated OpenStack: %w", err)
	}
	c.srv = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	c.url = "http://" + ln.Addr().String()
	go c.srv.Serve(ln)
	return nil
}

// URL is the base URL the cloud serves on, once Serve ran.
func (c *Cloud) URL() string { return c.url }

// AuthURL is the Keystone URL for clouds.yaml (auth.auth_url).
func (c *Cloud) AuthURL() string { return c.url + "/v3" }

// Close stops serving and closes the journal.
func (c *Cloud) Close() error {
	var err error
	if c.srv != nil {
		err = c.srv.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jfile != nil {
		err = errors.Join(err, c.jfile.Close())
		c.jfile = nil
	}
	return err
}

// Journal returns every request served so far, in order.
func (c *Cloud) Journal() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.journal...)
}

// CloudsYAML returns a clouds.yaml that points the OpenStack tools at this
// cloud, under the entry name, with its credentials.
func (c *Cloud) CloudsYAML(name string) []byte {
	cr := c.opts.Credentials
	domain := cr.Domain
	if domain == "" {
		domain = "Default"
	}
	return fmt.Appendf(nil, `clouds:
  %s:
    auth:
      auth_url: %s
      username: %q
      password: %q
      project_name: %q
      user_domain_name: %q
      project_domain_name: %q
    region_name: %q
    interface: public
    identity_api_version: 3
`, name, c.AuthURL(), cr.Username, cr.Password, cr.ProjectName, domain, domain, cr.Region)
}

// ServeHTTP implements http.Handler: journal, faults, authentication, then
// the services.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		c.record(Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: rec.status})
	}()
	if d := c.opts.Latency; d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	c.pickUpFaultFile()
	if f, ok := c.takeFault(r.Method, r.URL.Path); ok {
		writeJSON(rec, f.status(), map[string]any{"computeFault": map[string]any{"code": f.status(), "message": "simulated fault"}})
		return
	}
	path := r.URL.Path
	switch {
	case path == "/v3/auth/tokens" && r.Method == http.MethodPost:
		c.authenticate(rec, r)
		return
	case path == "/v3" || path == "/v3/":
		writeJSON(rec, http.StatusOK, map[string]any{"version": map[string]any{"id": "v3.14", "status": "stable"}})
		return
	}
	if !c.authorized(r.Header.Get("X-Auth-Token")) {
		writeJSON(rec, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}})
		return
	}
	switch {
	case strings.HasPrefix(path, computePrefix+"/"):
		c.compute(rec, r, strings.TrimPrefix(path, computePrefix))
	case strings.HasPrefix(path, networkPrefix+"/"):
		c.network(rec, r, strings.TrimPrefix(path, networkPrefix))
	case strings.HasPrefix(path, imagePrefix+"/"):
		c.image(rec, r, strings.TrimPrefix(path, imagePrefix))
	default:
		notFound(rec, "no such service")
	}
}

// Service prefixes of the catalog.
const (
	computePrefix = "/compute/v2.1"
	networkPrefix = "/network/v2.0"
	imagePrefix   = "/image/v2"
)

func (c *Cloud) record(req Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.journal = append(c.journal, req)
	if c.jfile != nil {
		fmt.Fprintln(c.jfile, req.String())
	}
}

// authenticate answers POST /v3/auth/tokens for password authentication.
func (c *Cloud) authenticate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						Name     string `json:"name"`
						Password string `json:"password"`
					} `json:"user"`
				} `json:"password"`
			} `json:"identity"`
			Scope struct {
				Project struct {
					Name string `json:"name"`
				} `json:"project"`
			} `json:"scope"`
		} `json:"auth"`
	}
	if err := decode(r, &body); err != nil {
		badRequest(w, err.Error())
		return
	}
	cr := c.opts.Credentials
	u := body.Auth.Identity.Password.User
	if (cr.Username != "" && u.Name != cr.Username) || (cr.Password != "" && u.Password != cr.Password) ||
		(cr.ProjectName != "" && body.Auth.Scope.Project.Name != cr.ProjectName) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}})
		return
	}
	token := newUUID()
	c.mu.Lock()
	c.tokens[token] = true
	c.mu.Unlock()
	now := c.opts.Now().UTC()
	base := "http://" + r.Host
	endpoint := func(kind, name, url string) map[string]any {
		return map[string]any{"type": kind, "name": name, "id": nameID(kind), "endpoints": []any{map[string]any{
			"id": nameID(kind + "-public"), "interface": "public", "region": cr.Region, "region_id": cr.Region, "url": url,
		}}}
	}
	domain := map[string]any{"id": "default", "name": "Default"}
	w.Header().Set("X-Subject-Token", token)
	writeJSON(w, http.StatusCreated, map[string]any{"token": map[string]any{
		"methods":    []string{"password"},
		"issued_at":  now.Format(time.RFC3339),
		"expires_at": now.Add(24 * time.Hour).Format(time.RFC3339),
		"user":       map[string]any{"id": nameID("user:" + u.Name), "name": u.Name, "domain": domain},
		"project":    map[string]any{"id": projectID, "name": body.Auth.Scope.Project.Name, "domain": domain},
		"roles":      []any{map[string]any{"id": nameID("role:member"), "name": "member"}},
		"catalog": []any{
			endpoint("identity", "keystone", base+"/v3"),
			endpoint("compute", "nova", base+computePrefix),
			endpoint("network", "neutron", base+"/network"),
			endpoint("image", "glance", base+"/image"),
		},
	}})
}

func (c *Cloud) authorized(token string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens[token]
}

// projectID is the one project the cloud has.
var projectID = nameID("project")

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"itemNotFound": map[string]any{"code": 404, "message": msg}, "NeutronError": map[string]any{"type": "NotFound", "message": msg}})
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"badRequest": map[string]any{"code": 400, "message": msg}, "NeutronError": map[string]any{"type": "BadRequest", "message": msg}})
}

func conflict(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusConflict, map[string]any{"conflictingRequest": map[string]any{"code": 409, "message": msg}, "NeutronError": map[string]any{"type": "Conflict", "message": msg}})
}

func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed request body: %w", err)
	}
	return nil
}

// newUUID returns a random version-4 UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

// nameID returns a UUID derived from name, stable across restarts.
func nameID(name string) string {
	sum := sha256.Sum256([]byte("rezuscloud-sim-openstack:" + name))
	var b [16]byte
	copy(b[:], sum[:16])
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
