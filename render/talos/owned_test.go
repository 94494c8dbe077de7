package talos

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// ownedValues are values of the right type for each bundle-owned field, as
// YAML flow (JSON), none of them the bundle's own.
var ownedValues = map[string]string{
	"machine.ca":                        `{"crt": "Y3J0", "key": "a2V5"}`,
	"machine.acceptedCAs":               `[{"crt": "Y3J0"}]`,
	"machine.token":                     `"abcdef.0123456789abcdef"`,
	"cluster.id":                        `"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("i", 32))) + `"`,
	"cluster.secret":                    `"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32))) + `"`,
	"cluster.token":                     `"abcdef.0123456789abcdef"`,
	"cluster.ca":                        `{"crt": "Y3J0", "key": "a2V5"}`,
	"cluster.acceptedCAs":               `[{"crt": "Y3J0"}]`,
	"cluster.aggregatorCA":              `{"crt": "Y3J0", "key": "a2V5"}`,
	"cluster.serviceAccount":            `{"key": "a2V5"}`,
	"cluster.etcd.ca":                   `{"crt": "Y3J0", "key": "a2V5"}`,
	"cluster.secretboxEncryptionSecret": `"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("b", 32))) + `"`,
	"cluster.aescbcEncryptionSecret":    `"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", 32))) + `"`,
}

// strategicPatch is a strategic merge patch that sets the dotted path to
// value (YAML flow), written as an operator writes one: nested sections.
func strategicPatch(path, value string) string {
	var b strings.Builder
	keys := strings.Split(path, ".")
	for i, k := range keys {
		b.WriteString(strings.Repeat("  ", i) + k + ":")
		if i == len(keys)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func jsonPointer(path string) string { return "/" + strings.ReplaceAll(path, ".", "/") }

// jsonAdd is a JSON 6902 patch that adds value at path; a field that the
// config does not have yet is added with its section (a worker has no
// cluster.etcd), which JSON 6902 cannot create on its own.
func jsonAdd(path, value string, present bool) string {
	if i := strings.LastIndexByte(path, '.'); !present && strings.Count(path, ".") > 1 {
		path, value = path[:i], `{"`+path[i+1:]+`": `+value+`}`
	}
	return `[{"op": "add", "path": "` + jsonPointer(path) + `", "value": ` + value + `}]`
}

// Every field that the secrets bundle owns is refused, whatever kind of
// patch sets, replaces or removes it, on both roles, and the error names
// the patch, its file:line and the field, and says that keys are not
// rotated with a patch. Every field is tested at least by a strategic
// merge and a JSON 6902 add on each role.
func TestMachineConfigRefusesBundleFields(t *testing.T) {
	if len(ownedValues) != len(bundleFields) {
		t.Fatalf("ownedValues has %d fields, bundleFields %d", len(ownedValues), len(bundleFields))
	}
	for _, role := range []string{RoleControlPlane, RoleWorker} {
		base, err := build(baseInput(t, role))
		if err != nil {
			t.Fatal(err)
		}
		before := bundleValuesOf(base)
		for i, f := range bundleFields {
			value := ownedValues[f.path]
			present := before[i] != "" && before[i] != "." && before[i] != "\x00"
			kinds := map[string]string{
				"strategic merge": strategicPatch(f.path, value),
				"multi-document": "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: web-1\n---\n" +
					strategicPatch(f.path, value),
				"json6902 add": jsonAdd(f.path, value, present),
			}
			if present {
				kinds["json6902 replace"] = `[{"op": "replace", "path": "` + jsonPointer(f.path) + `", "value": ` + value + `}]`
				kinds["json6902 remove"] = "- op: remove\n  path: " + jsonPointer(f.path) + "\n"
			}
			for kind, text := range kinds {
				t.Run(role+"/"+f.path+"/"+kind, func(t *testing.T) {
					in := baseInput(t, role)
					good := Patch{Name: "labels", Source: "tenants/alpha.yaml:9", Patch: "machine:\n  nodeLabels:\n    a: b\n"}
					bad := Patch{Name: "rotate", Source: "patches/rotate.yaml:7", Patch: text}
					in.Patches = []Patch{good, bad}
					out, err := MachineConfig(in)
					var pe *PatchError
					if !errors.As(err, &pe) || pe.Patch != bad {
						t.Fatalf("MachineConfig = %d bytes, %v; want a PatchError naming patch rotate", len(out), err)
					}
					verb := "set "
					if strings.Contains(kind, "remove") {
						verb = "remove "
					}
					for _, want := range []string{`config patch "rotate" (patches/rotate.yaml:7): may not `, verb + f.path + ":",
						"secrets bundle owns this field", "cluster keys are not rotated with a patch"} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("error %q does not contain %q", err, want)
						}
					}
					if cerr := CheckMachineConfig(in); !sameError(cerr, err) {
						t.Errorf("CheckMachineConfig: %v\nMachineConfig:      %v", cerr, err)
					}
				})
			}
		}
	}
}

// A patch that sets a bundle-owned field to the value it already has
// changes nothing and passes; one that sets another CA's certificate and key
// (the way to lock the server out of a machine) is refused, also when a
// later patch would set it back.
func TestMachineConfigBundleFieldsKeepTheirValues(t *testing.T) {
	in := baseInput(t, RoleControlPlane)
	base, err := build(in)
	if err != nil {
		t.Fatal(err)
	}
	own := base.Machine().Security().IssuingCA()
	same := Patch{Name: "same-ca", Source: "a.yaml:1", Patch: strategicPatch("machine.ca",
		`{"crt": "`+base64.StdEncoding.EncodeToString(own.Crt)+`", "key": "`+base64.StdEncoding.EncodeToString(own.Key)+`"}`)}
	in.Patches = []Patch{same}
	if _, err := MachineConfig(in); err != nil {
		t.Fatalf("a patch that leaves machine.ca as it is: %v", err)
	}

	other, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	otherIn := baseInput(t, RoleControlPlane)
	otherIn.Secrets = other
	otherCfg, err := build(otherIn)
	if err != nil {
		t.Fatal(err)
	}
	theirs := otherCfg.Machine().Security().IssuingCA()
	foreign := Patch{Name: "own-ca", Source: "b.yaml:2", Patch: strategicPatch("machine.ca",
		`{"crt": "`+base64.StdEncoding.EncodeToString(theirs.Crt)+`", "key": "`+base64.StdEncoding.EncodeToString(theirs.Key)+`"}`)}
	in.Patches = []Patch{foreign, same}
	_, err = MachineConfig(in)
	var pe *PatchError
	if !errors.As(err, &pe) || pe.Patch != foreign || !strings.Contains(err.Error(), "may not set machine.ca:") {
		t.Fatalf("err = %v, want a PatchError naming own-ca and machine.ca", err)
	}
}

// A patch that changes several bundle-owned fields names each of them, and
// one that deletes the cluster section names what it removes.
func TestMachineConfigNamesEveryBundleField(t *testing.T) {
	in := baseInput(t, RoleControlPlane)
	in.Patches = []Patch{{Name: "keys", Source: "k.yaml:3", Patch: "machine:\n  token: abcdef.0123456789abcdef\ncluster:\n  token: abcdef.0123456789abcdef\n"}}
	_, err := MachineConfig(in)
	if err == nil || !strings.Contains(err.Error(), "may not set machine.token, cluster.token: the tenant's secrets bundle owns these fields") {
		t.Errorf("err = %v", err)
	}
	in.Patches = []Patch{{Name: "no-cluster", Source: "k.yaml:4", Patch: "cluster:\n  $patch: delete\n"}}
	_, err = MachineConfig(in)
	if err == nil || !strings.Contains(err.Error(), "may not remove cluster.id, cluster.secret, cluster.token, cluster.ca,") {
		t.Errorf("err = %v", err)
	}
}
