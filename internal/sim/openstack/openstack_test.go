package openstack

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// client talks to a Cloud over real HTTP, as the provider would.
type client struct {
	t     *testing.T
	c     *Cloud
	token string
}

func newCloud(t *testing.T, dir string, hook Hook) (*Cloud, *client) {
	t.Helper()
	c, err := Open(Options{Dir: dir, Addresses: netip.MustParsePrefix("127.9.0.0/16"),
		Credentials: Credentials{Username: "u", Password: "pw-123456", ProjectName: "p"}, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := &client{t: t, c: c}
	code, _, hdr := cl.do("POST", "/v3/auth/tokens", `{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"u","password":"pw-123456","domain":{"name":"Default"}}}},"scope":{"project":{"name":"p","domain":{"name":"Default"}}}}}`)
	if code != http.StatusCreated || hdr.Get("X-Subject-Token") == "" {
		t.Fatalf("auth: %d", code)
	}
	cl.token = hdr.Get("X-Subject-Token")
	return c, cl
}

func (cl *client) do(method, path, body string) (int, map[string]any, http.Header) {
	cl.t.Helper()
	req, _ := http.NewRequest(method, cl.c.URL()+path, strings.NewReader(body))
	if cl.token != "" {
		req.Header.Set("X-Auth-Token", cl.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cl.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	json.Unmarshal(b, &v)
	return resp.StatusCode, v, resp.Header
}

func (cl *client) createServer(name, userData string) (int, string) {
	cl.t.Helper()
	flavor, image := nameID("flavor:m1.small"), nameID("image:talos-1.12.6")
	body, _ := json.Marshal(map[string]any{"server": map[string]any{
		"name": name, "flavorRef": flavor, "imageRef": image,
		"user_data": base64.StdEncoding.EncodeToString([]byte(userData)),
		"networks":  []any{map[string]any{"uuid": nameID("network:tenant-net")}},
	}})
	code, v, _ := cl.do("POST", "/compute/v2.1/servers", string(body))
	id := ""
	if s, ok := v["server"].(map[string]any); ok {
		id, _ = s["id"].(string)
	}
	return code, id
}

func (cl *client) server(id string) map[string]any {
	cl.t.Helper()
	code, v, _ := cl.do("GET", "/compute/v2.1/servers/"+id, "")
	if code != http.StatusOK {
		cl.t.Fatalf("GET server %s: %d", id, code)
	}
	return v["server"].(map[string]any)
}

func address(s map[string]any) string {
	for _, nics := range s["addresses"].(map[string]any) {
		return nics.([]any)[0].(map[string]any)["addr"].(string)
	}
	return ""
}

type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) OnServer(ev Event, id string, addr netip.Addr, userData []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev.String()+" "+addr.String()+" "+string(userData))
}

func TestServerLifecycleAndRestart(t *testing.T) {
	dir := t.TempDir()
	hook := &events{}
	c, cl := newCloud(t, dir, hook)
	code, id := cl.createServer("n0", "machine: {}\n")
	if code != http.StatusAccepted || id == "" {
		t.Fatalf("create: %d %q", code, id)
	}
	s := cl.server(id)
	addr := address(s)
	if s["status"] != "ACTIVE" || !netip.MustParsePrefix("127.9.0.0/16").Contains(netip.MustParseAddr(addr)) {
		t.Fatalf("first read: status %v address %s, want ACTIVE in 127.9.0.0/16", s["status"], addr)
	}
	_, id2 := cl.createServer("n1", "x")
	if a2 := address(cl.server(id2)); a2 == addr {
		t.Fatalf("two servers share %s", a2)
	}
	if len(hook.got) != 2 || hook.got[0] != "created "+addr+" machine: {}\n" {
		t.Fatalf("hook = %q", hook.got)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, stateFile))
	if bytes.Contains(raw, []byte("machine: {}")) {
		t.Fatal("state file holds user data")
	}
	c.Close()

	// A restart keeps the servers and tells the hook about them.
	hook2 := &events{}
	_, cl = newCloud(t, dir, hook2)
	if got := address(cl.server(id)); got != addr {
		t.Fatalf("after restart the server has address %s, want %s", got, addr)
	}
	restored := strings.Join(hook2.got, "\n")
	if len(hook2.got) != 2 || strings.Count(restored, "restored ") != 2 || !strings.Contains(restored, "restored "+addr+" ") {
		t.Fatalf("restart hook = %q, want both servers restored", hook2.got)
	}
	if code, _, _ := cl.do("DELETE", "/compute/v2.1/servers/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := cl.do("GET", "/compute/v2.1/servers/"+id, ""); code != http.StatusNotFound {
		t.Fatalf("GET after delete: %d, want 404", code)
	}
	if hook2.got[len(hook2.got)-1] != "deleted "+addr+" " {
		t.Fatalf("delete hook = %q", hook2.got)
	}
	code, v, _ := cl.do("GET", "/network/v2.0/ports?device_id="+id, "")
	if code != http.StatusOK || len(v["ports"].([]any)) != 0 {
		t.Fatalf("the port Nova made for the server outlived it: %v", v)
	}
}

func TestAuthAndLimits(t *testing.T) {
	c, cl := newCloud(t, t.TempDir(), nil)
	bad := &client{t: t, c: c}
	code, _, _ := bad.do("POST", "/v3/auth/tokens", `{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"u","password":"wrong"}}},"scope":{"project":{"name":"p"}}}}`)
	if code != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d, want 401", code)
	}
	if code, _, _ := bad.do("GET", "/compute/v2.1/flavors/detail", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := cl.createServer("big", strings.Repeat("x", 49200)); code != http.StatusBadRequest {
		t.Fatalf("user data over 65,535 bytes of base64: %d, want 400", code)
	}
	if code, _ := cl.createServer("fits", strings.Repeat("x", 49149)); code != http.StatusAccepted {
		t.Fatalf("user data of 65,532 bytes of base64: %d, want 202", code)
	}
}

func TestFaults(t *testing.T) {
	dir := t.TempDir()
	hook := &events{}
	c, cl := newCloud(t, dir, hook)
	c.Inject(Fault{Method: "POST", Path: "/compute/v2.1/servers", Count: 2})
	for i := 0; i < 2; i++ {
		if code, _ := cl.createServer("f", "u"); code != http.StatusInternalServerError {
			t.Fatalf("faulted create %d: %d, want 500", i, code)
		}
	}
	_, ok := cl.createServer("ok", "u")
	if ok == "" {
		t.Fatal("create after the faults failed")
	}
	c.Inject(Fault{Path: "/compute/v2.1/servers/"})
	if code, _, _ := cl.do("GET", "/compute/v2.1/servers/"+ok, ""); code != http.StatusInternalServerError {
		t.Fatalf("a fault on every path below /compute/v2.1/servers/: GET %d, want 500", code)
	}
	if err := c.NextServers("BUILD", "ERROR"); err != nil {
		t.Fatal(err)
	}
	_, building := cl.createServer("b", "u")
	_, failed := cl.createServer("e", "u")
	if st := cl.server(building)["status"]; st != "BUILD" {
		t.Fatalf("BUILD fault: status %v", st)
	}
	if s := cl.server(failed); s["status"] != "ERROR" || s["fault"] == nil {
		t.Fatalf("ERROR fault: %v", s)
	}
	if len(hook.got) != 1 {
		t.Fatalf("servers that never booted reached the hook: %q", hook.got)
	}
	// A fault file dropped by another process.
	if err := WriteFaults(dir, Faults{HTTP: []Fault{{Path: "/network/v2.0/ports", Status: 503}}, Servers: []string{"ERROR"}}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := cl.do("GET", "/network/v2.0/ports", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("fault file: %d, want 503", code)
	}
	if _, err := os.Stat(filepath.Join(dir, FaultFile)); !os.IsNotExist(err) {
		t.Fatalf("fault file not consumed: %v", err)
	}
	if _, id := cl.createServer("e2", "u"); cl.server(id)["status"] != "ERROR" {
		t.Fatal("the fault file's server status was not applied")
	}
	j, _ := os.ReadFile(filepath.Join(dir, journalFile))
	if !strings.Contains(string(j), "POST /compute/v2.1/servers 500\n") || !strings.Contains(string(j), "GET /network/v2.0/ports 503\n") {
		t.Fatalf("journal.log:\n%s", j)
	}
}

func TestOpenRefusesNonLoopback(t *testing.T) {
	for _, block := range []string{"10.0.0.0/16", "127.0.0.0/7", "192.0.2.0/24"} {
		if _, err := Open(Options{Dir: t.TempDir(), Addresses: netip.MustParsePrefix(block)}); err == nil {
			t.Errorf("block %s accepted", block)
		}
	}
	c, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Serve("0.0.0.0:0"); err == nil {
		t.Error("Serve on 0.0.0.0 accepted")
	}
}

// TestServerHookHearsTheFlavor: a ServerHook hears the flavor of a
// server that boots and of one restored at a restart, so that the
// machine it boots as is sized like it; a deleted one has none.
func TestServerHookHearsTheFlavor(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var got []string
	hook := ServerHookFunc(func(ev Event, s Server) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s %s %d/%d/%d", ev, s.Flavor.Name, s.Flavor.VCPUs, s.Flavor.RAMMiB, s.Flavor.DiskGiB))
	})
	c, cl := newCloud(t, dir, hook)
	code, id := cl.createServer("n0", "machine: {}\n")
	if code != http.StatusAccepted {
		t.Fatalf("create: %d", code)
	}
	c.Close()
	c, cl = newCloud(t, dir, hook)
	if code, _, _ := cl.do("DELETE", "/compute/v2.1/servers/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"created m1.small 2/4096/20", "restored m1.small 2/4096/20", "deleted  0/0/0"}
	if !slices.Equal(got, want) {
		t.Fatalf("hook heard %q, want %q", got, want)
	}
}

// TestLatency: every request waits Latency before its answer, reads and
// writes alike, and requests wait side by side, not one after another.
func TestLatency(t *testing.T) {
	const d = 200 * time.Millisecond
	c, err := Open(Options{Dir: t.TempDir(), Addresses: netip.MustParsePrefix("127.9.0.0/16"),
		Credentials: Credentials{Username: "u", Password: "pw-123456", ProjectName: "p"}, Latency: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := &client{t: t, c: c}
	start := time.Now()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { cl.do("GET", "/v3", "") })
	}
	wg.Wait()
	if took := time.Since(start); took < d || took > 4*d {
		t.Fatalf("five requests at once took %s, want about %s", took, d)
	}
}
