package deploy

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The three-machine layout of docs/replicas.md: an etcd member and a
// replica on each machine.
const (
	etcdUnit      = "systemd/etcd.service"
	etcdEnv       = "systemd/etcd.env"
	replicaDropIn = "systemd/replica.conf"
)

// envFile reads NAME=value lines, skipping comments and blank lines.
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s: %q is not NAME=value", path, l)
		}
		env[k] = v
	}
	return env
}

// unitEnv returns a unit's Environment= settings as a map.
func unitEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range directives(t, path)["Environment"] {
		k, v, _ := strings.Cut(strings.TrimSpace(e), "=")
		env[k] = v
	}
	return env
}

// TestSystemdReplicaLayout: the etcd member, its settings and the
// replica's drop-in agree with each other and with the flags of etcd and
// of rezuscloud serve.
func TestSystemdReplicaLayout(t *testing.T) {
	member := envFile(t, etcdEnv)
	unit := unitEnv(t, etcdUnit)
	var all []string
	for k, v := range member {
		all = append(all, k+"="+v)
	}
	for k, v := range unit {
		all = append(all, k+"="+v)
	}
	checkEtcdEnv(t, all)
	for _, k := range []string{"ETCD_CLIENT_CERT_AUTH", "ETCD_PEER_CLIENT_CERT_AUTH"} {
		if member[k] != "true" {
			t.Errorf("%s=%q, want true: any host could reach the store", k, member[k])
		}
	}
	for _, k := range []string{"ETCD_KEY_FILE", "ETCD_PEER_KEY_FILE", "ETCD_CERT_FILE", "ETCD_TRUSTED_CA_FILE"} {
		if !strings.HasPrefix(unit[k], "%d/") {
			t.Errorf("%s=%q, want a file of the credentials directory", k, unit[k])
		}
	}

	// The initial cluster names three members, this one among them with
	// its own peer URL; the replicas reach each at its client URL.
	peers := map[string]string{}
	for _, p := range strings.Split(member["ETCD_INITIAL_CLUSTER"], ",") {
		name, u, _ := strings.Cut(p, "=")
		peers[name] = u
	}
	if len(peers) != 3 || peers[member["ETCD_NAME"]] != member["ETCD_INITIAL_ADVERTISE_PEER_URLS"] {
		t.Errorf("ETCD_INITIAL_CLUSTER %s: want three members, %s at %s", member["ETCD_INITIAL_CLUSTER"], member["ETCD_NAME"], member["ETCD_INITIAL_ADVERTISE_PEER_URLS"])
	}
	replica := unitEnv(t, replicaDropIn)
	var endpoints []string
	for _, u := range peers {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		endpoints = append(endpoints, "https://"+p.Hostname()+":2379")
	}
	slices.Sort(endpoints)
	if got := strings.Split(replica["REZUSCLOUD_ETCD_ENDPOINTS"], ","); !slices.Equal(got, endpoints) {
		t.Errorf("REZUSCLOUD_ETCD_ENDPOINTS %v, want the members' client URLs %v", got, endpoints)
	}
	if !slices.Contains(endpoints, member["ETCD_ADVERTISE_CLIENT_URLS"]) {
		t.Errorf("ETCD_ADVERTISE_CLIENT_URLS %s is not among the endpoints %v", member["ETCD_ADVERTISE_CLIENT_URLS"], endpoints)
	}

	// The replica: on etcd, with its certificate as credentials, and a
	// state URL that is not its own.
	var env []string
	for k, v := range replica {
		env = append(env, k+"="+v)
	}
	checkEnv(t, replicaDropIn, env)
	if replica["REZUSCLOUD_STORE"] != "etcd" {
		t.Errorf("REZUSCLOUD_STORE=%q, want etcd", replica["REZUSCLOUD_STORE"])
	}
	creds := directives(t, replicaDropIn)["LoadCredential"]
	for _, k := range []string{"REZUSCLOUD_ETCD_CA_FILE", "REZUSCLOUD_ETCD_CERT_FILE", "REZUSCLOUD_ETCD_KEY_FILE"} {
		name, ok := strings.CutPrefix(replica[k], "%d/")
		if !ok || !slices.ContainsFunc(creds, func(c string) bool { return strings.HasPrefix(c, name+":") }) {
			t.Errorf("%s=%q is not a credential the drop-in loads (%v)", k, replica[k], creds)
		}
	}
	if u, err := url.Parse(replica["REZUSCLOUD_STATE_URL"]); err != nil || u.Host == "" || strings.Contains(replica["REZUSCLOUD_ETCD_ENDPOINTS"], "//"+u.Hostname()+":") {
		t.Errorf("REZUSCLOUD_STATE_URL %q, want the load balancer's URL", replica["REZUSCLOUD_STATE_URL"])
	}
}

// checkEtcdEnv fails for every ETCD_ variable in env (NAME=value) that is
// not an etcd flag (ETCD_DATA_DIR is --data-dir), asked with `etcd
// --help`; without the binary it says so and checks nothing.
func checkEtcdEnv(t *testing.T, env []string) {
	t.Helper()
	var args []string
	for _, e := range env {
		name, v, _ := strings.Cut(e, "=")
		flag, ok := strings.CutPrefix(name, "ETCD_")
		if !ok {
			t.Errorf("%s is not a setting of etcd", name)
			continue
		}
		args = append(args, "--"+strings.ReplaceAll(strings.ToLower(flag), "_", "-")+"="+v)
	}
	checkEtcdFlags(t, args)
}

// TestSystemdReplicaVerify runs systemd-analyze verify on etcd.service and
// on rezuscloud.service with the replica drop-in, as
// TestSystemdAnalyzeVerify does for the unit alone, and wants etcd's
// exposure as low as the server's.
func TestSystemdReplicaVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units are not verified")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	read := func(path, binary string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if binary != "" {
			b = bytes.Replace(b, []byte("ExecStart="+binary), []byte("ExecStart="+self), 1)
		}
		return b
	}
	dir := t.TempDir()
	etcd := filepath.Join(dir, "etcd.service")
	replica := filepath.Join(dir, "rezuscloud-replica.service")
	os.WriteFile(etcd, read(etcdUnit, "/usr/local/bin/etcd"), 0o644)
	os.WriteFile(replica, append(read(unitFile, "/usr/local/bin/rezuscloud"), read(replicaDropIn, "")...), 0o644)
	for _, f := range []string{etcd, replica} {
		out, err := exec.Command(analyze, "verify", f).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(f), err, out)
		}
	}
	checkExposure(t, analyze, etcd)
}
