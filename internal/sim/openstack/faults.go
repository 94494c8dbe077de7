package openstack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Fault makes the next Count requests that match answer Status.
type Fault struct {
	// Method matches the request method; "" matches any.
	Method string `json:"method,omitempty"`
	// Path matches a request path that equals it, such as
	// "/compute/v2.1/servers" (the create of a server, not the reads of
	// one); a Path ending in "/" matches every path below it.
	Path string `json:"path"`
	// Status is the answer; 500 when zero.
	Status int `json:"status,omitempty"`
	// Count is how many requests fail; 1 when zero.
	Count int `json:"count,omitempty"`
}

func (f Fault) status() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

func (f Fault) matches(method, path string) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, method) {
		return false
	}
	if strings.HasSuffix(f.Path, "/") {
		return strings.HasPrefix(path, f.Path)
	}
	return path == f.Path
}

// Faults is the content of a faults.json that a process drops into the
// cloud's directory: the cloud reads it at its next request, adds what it
// says to the faults of the running cloud, and removes the file. Write it
// through a temporary file and a rename.
type Faults struct {
	HTTP []Fault `json:"http,omitempty"`
	// Servers are the statuses of the next servers created, in order:
	// "BUILD" for one that never becomes ACTIVE, "ERROR" for one that
	// fails to build.
	Servers []string `json:"servers,omitempty"`
}

// Inject adds an HTTP fault.
func (c *Cloud) Inject(f Fault) {
	if f.Count <= 0 {
		f.Count = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, f)
}

// NextServers makes the next servers created end up in the statuses given,
// in order: "BUILD" (they never become ACTIVE) or "ERROR" (they fail).
func (c *Cloud) NextServers(statuses ...string) error {
	for _, s := range statuses {
		if s != "BUILD" && s != "ERROR" {
			return fmt.Errorf("simulated OpenStack: server status %q: want BUILD or ERROR", s)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.builds = append(c.builds, statuses...)
	return nil
}

// WriteFaults drops faults into the directory of a cloud that may run in
// another process.
func WriteFaults(dir string, f Faults) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".faults-*")
	if err != nil {
		return fmt.Errorf("write faults: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, FaultFile))
	}
	if err != nil {
		return fmt.Errorf("write faults: %w", err)
	}
	return nil
}

// pickUpFaultFile adds the faults of a dropped faults.json. A file that
// does not parse is renamed to faults.json.invalid and ignored.
func (c *Cloud) pickUpFaultFile() {
	p := filepath.Join(c.opts.Dir, FaultFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return
	}
	var f Faults
	if err := json.Unmarshal(b, &f); err != nil {
		os.Rename(p, p+".invalid")
		return
	}
	if os.Remove(p) != nil {
		return // another request took it
	}
	for _, h := range f.HTTP {
		c.Inject(h)
	}
	if err := c.NextServers(f.Servers...); err != nil {
		os.WriteFile(p+".invalid", b, 0o600)
	}
}

// takeFault consumes one matching fault.
func (c *Cloud) takeFault(method, path string) (Fault, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.faults {
		f := &c.faults[i]
		if f.Count > 0 && f.matches(method, path) {
			f.Count--
			hit := *f
			if f.Count == 0 {
				c.faults = append(c.faults[:i], c.faults[i+1:]...)
			}
			return hit, true
		}
	}
	return Fault{}, false
}

// takeBuild returns the status the next server gets.
func (c *Cloud) takeBuild() string {
	if len(c.builds) == 0 {
		return "ACTIVE"
	}
	s := c.builds[0]
	c.builds = c.builds[1:]
	return s
}
