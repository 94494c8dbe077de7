package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const unitFile = "systemd/rezuscloud.service"

// directives reads a unit file into its key=value lines, continuation
// lines joined; a key that repeats keeps every value.
func directives(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := map[string][]string{}
	var line string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (line == "" && l == "") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		if k, v, ok := strings.Cut(line, "="); ok {
			d[k] = append(d[k], v)
		}
		line = ""
	}
	return d
}

func TestSystemdUnitHardening(t *testing.T) {
	d := directives(t, unitFile)
	for key, want := range map[string]string{
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"NoNewPrivileges":         "yes",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
		"SystemCallFilter":        "@system-service",
		"CapabilityBoundingSet":   "",
		"StateDirectory":          "rezuscloud",
		"KillMode":                "process",
		"LoadCredential":          "tokens:/etc/rezuscloud/tokens",
		"User":                    "rezuscloud",
	} {
		if !containsValue(d[key], want) {
			t.Errorf("%s=%q, want %q", key, d[key], want)
		}
	}
	exec := strings.Join(d["ExecStart"], " ")
	if !strings.Contains(exec, "--tokens-file=%d/tokens") {
		t.Errorf("ExecStart %q does not read the tokens from the credentials directory", exec)
	}
	checkServeFlags(t, "ExecStart", strings.Fields(exec)[2:])
	checkEnv(t, "credentials.conf", directives(t, "systemd/credentials.conf")["Environment"])
	// The server waits --shutdown-grace for running applies; systemd must
	// wait longer before it kills the server.
	grace := regexp.MustCompile(`--shutdown-grace=(\d+)m`).FindStringSubmatch(exec)
	stop := regexp.MustCompile(`^(\d+)min$`).FindStringSubmatch(strings.Join(d["TimeoutStopSec"], ""))
	if grace == nil || stop == nil {
		t.Fatalf("ExecStart has no --shutdown-grace=Nm (%q) or TimeoutStopSec is not Nmin (%q)", exec, d["TimeoutStopSec"])
	}
	if g, s := atoi(grace[1]), atoi(stop[1]); s <= g {
		t.Errorf("TimeoutStopSec=%dmin does not outlast --shutdown-grace=%dm", s, g)
	}
}

func containsValue(vals []string, want string) bool {
	for _, v := range vals {
		if strings.TrimSpace(v) == want {
			return true
		}
	}
	return false
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestSystemdAnalyzeVerify runs systemd-analyze verify on the unit, alone
// and with the credentials drop-in, and fails on anything it reports: it
// exits 0 for a directive it ignores. ExecStart points at this test binary,
// because verify checks that the command exists.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit is not verified")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit = bytes.Replace(unit, []byte("ExecStart=/usr/local/bin/rezuscloud"), []byte("ExecStart="+self), 1)
	dropIn, err := os.ReadFile("systemd/credentials.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	alone := filepath.Join(dir, "rezuscloud.service")
	merged := filepath.Join(dir, "rezuscloud-credentials.service")
	os.WriteFile(alone, unit, 0o644)
	os.WriteFile(merged, append(unit, dropIn...), 0o644)
	for _, f := range []string{alone, merged} {
		out, err := exec.Command(analyze, "verify", f).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(f), err, out)
		}
	}
	checkExposure(t, analyze, alone)
}

// checkExposure asks systemd-analyze security (offline, systemd >= 250)
// for the unit's exposure level, and wants it "OK" or better (< 4.0 of 10).
func checkExposure(t *testing.T, analyze, unit string) {
	out, err := exec.Command(analyze, "security", "--offline=yes", unit).CombinedOutput()
	if err != nil && bytes.Contains(out, []byte("unrecognized option")) {
		t.Logf("systemd-analyze security --offline is not supported here: %s", bytes.TrimSpace(out))
		return
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: exposure %.1f", level)
	if level >= 4.0 {
		t.Errorf("exposure level %.1f, want < 4.0 (OK)\n%s", level, out)
	}
}
