package redact_test

import (
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/internal/redact"
)

// bundles keeps the bundles testBundle made, by Talos version: each takes
// a second or two (an RSA service account key).
var bundles = map[string]*secrets.Bundle{}

// testBundle makes a Talos secrets bundle as machinery makes it for a
// tenant, with the contract of the given Talos version.
func testBundle(t *testing.T, talosVersion string) *secrets.Bundle {
	t.Helper()
	if b := bundles[talosVersion]; b != nil {
		return b
	}
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		t.Fatal(err)
	}
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), contract)
	if err != nil {
		t.Fatal(err)
	}
	bundles[talosVersion] = b
	return b
}

// bundleSecrets names every value of a bundle as text shows it: the
// base64 of each certificate's and key's PEM, each PEM itself, and the
// tokens, encryption secrets and cluster ID and secret.
func bundleSecrets(b *secrets.Bundle) map[string]string {
	out := map[string]string{
		"bootstrap token":  b.Secrets.BootstrapToken,
		"trustd token":     b.TrustdInfo.Token,
		"secretbox secret": b.Secrets.SecretboxEncryptionSecret,
		"aescbc secret":    b.Secrets.AESCBCEncryptionSecret,
		"cluster id":       b.Cluster.ID,
		"cluster secret":   b.Cluster.Secret,
	}
	pair := func(what string, crt, key []byte) {
		if crt != nil {
			out[what+" certificate"] = string(crt)
			out[what+" certificate (base64)"] = base64.StdEncoding.EncodeToString(crt)
		}
		out[what+" key"] = string(key)
		out[what+" key (base64)"] = base64.StdEncoding.EncodeToString(key)
	}
	pair("etcd CA", b.Certs.Etcd.Crt, b.Certs.Etcd.Key)
	pair("Kubernetes CA", b.Certs.K8s.Crt, b.Certs.K8s.Key)
	pair("aggregator CA", b.Certs.K8sAggregator.Crt, b.Certs.K8sAggregator.Key)
	pair("service account", nil, b.Certs.K8sServiceAccount.Key)
	pair("Talos API CA", b.Certs.OS.Crt, b.Certs.OS.Key)
	for k, v := range out {
		if v == "" {
			delete(out, k)
		}
	}
	return out
}

// pieces are the parts of a secret that must not survive redaction: the
// secret, and for a PEM block each line of its body.
func pieces(secret string) []string {
	out := []string{secret}
	if blk, _ := pem.Decode([]byte(secret)); blk != nil {
		for _, l := range strings.Split(secret, "\n") {
			if l != "" && !strings.HasPrefix(l, "-----") {
				out = append(out, l)
			}
		}
	}
	return out
}

func checkGone(t *testing.T, where, got string, secret map[string]string) {
	t.Helper()
	for what, v := range secret {
		for _, p := range pieces(v) {
			if strings.Contains(got, p) {
				t.Errorf("%s: the %s survives redaction (%d bytes of it)", where, what, len(p))
			}
		}
	}
}

// destroyOutput is the plan a `tofu apply -destroy` prints for a
// terraform_data whose output holds yaml, as tofu 1.10 prints it: the
// value as a heredoc, indented.
func destroyOutput(yamlText string) string {
	var b strings.Builder
	b.WriteString("  # terraform_data.talos_secrets will be destroyed\n")
	b.WriteString("  - resource \"terraform_data\" \"talos_secrets\" {\n")
	b.WriteString("      - id     = \"7a7bf0dd-8041-d55b-cc68-bdc04c482619\" -> null\n")
	b.WriteString("      - input  = (sensitive value) -> null\n")
	b.WriteString("      - output = <<-EOT\n")
	for _, l := range strings.Split(strings.TrimRight(yamlText, "\n"), "\n") {
		b.WriteString("            " + l + "\n")
	}
	b.WriteString("        EOT -> null\n    }\n\nPlan: 0 to add, 0 to change, 3 to destroy.\n")
	return b.String()
}

// TestTextRemovesEveryBundleValue redacts a Talos secrets bundle as tofu
// prints it, as a config carries it and as JSON escapes it, for the
// contracts of Talos 1.12 (secretbox) and 1.2 (AES-CBC): no value of it,
// nor any line of its PEM blocks, survives.
func TestTextRemovesEveryBundleValue(t *testing.T) {
	for _, version := range []string{"1.12.6", "1.2.0"} {
		t.Run(version, func(t *testing.T) {
			b := testBundle(t, version)
			secret := bundleSecrets(b)
			y, err := yaml.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			var pems strings.Builder
			for what, v := range secret {
				if !strings.HasSuffix(what, "(base64)") && strings.HasPrefix(v, "-----") {
					pems.WriteString(v)
				}
			}
			for name, text := range map[string]string{
				"destroy plan":        destroyOutput(string(y)),
				"bundle yaml":         string(y),
				"plain PEM blocks":    "Error: bad certificate\n" + pems.String() + "in request\n",
				"JSON-escaped output": strings.ReplaceAll(destroyOutput(string(y))+pems.String(), "\n", `\n`),
				"base64 of the yaml":  "user_data = \"" + base64.StdEncoding.EncodeToString(y) + "\"\n",
			} {
				got := redact.Text(text)
				checkGone(t, name, got, secret)
				if !strings.Contains(got, redact.Mark) {
					t.Errorf("%s: nothing redacted", name)
				}
			}
		})
	}
}

// TestTextCutPEM redacts PEM blocks that a tail of output cut off: one
// without its start, one without its end.
func TestTextCutPEM(t *testing.T) {
	key := string(testBundle(t, "1.12.6").Certs.K8sServiceAccount.Key)
	lines := strings.Split(strings.TrimRight(key, "\n"), "\n")
	if len(lines) < 6 {
		t.Fatalf("the service account key has %d lines", len(lines))
	}
	for name, text := range map[string]string{
		"no BEGIN":           strings.Join(lines[3:], "\n") + "\nApply complete!\n",
		"no END":             "Error: parse key\n" + strings.Join(lines[:len(lines)-3], "\n"),
		"indented, no BEGIN": "        " + strings.Join(lines[3:], "\n        ") + "\n    EOT -> null\n",
	} {
		got := redact.Text(text)
		for _, l := range lines[1 : len(lines)-1] {
			if strings.Contains(got, l) {
				t.Errorf("%s: a line of the key survives:\n%s", name, got)
				break
			}
		}
	}
	// What follows a block cut at its start is kept.
	if got := redact.Text(strings.Join(lines[3:], "\n") + "\nApply complete!\n"); !strings.HasSuffix(got, "\nApply complete!\n") {
		t.Errorf("the text after a cut PEM block is gone: %q", got)
	}
}

// TestTextEachForm redacts each form on its own line, in the middle of
// ordinary text that stays as it was.
func TestTextEachForm(t *testing.T) {
	for name, secret := range map[string]string{
		"bootstrap token":           "ko2m88.5akwd6kihwh6kyfp",
		"trustd token":              "5hf8x0.3lbso2hhacyinba9",
		"cluster id (URL alphabet)": "psmYn9YkS-ofSOo21QIe3Dcbb41ddpOIZAbJowC5TKc=",
		"cluster secret":            "MCOKFmRput30jw7Q0fYsmsEHOnP6JWtVmthWSO8O6/8=",
		"secretbox secret":          "gqDr5byY6xT4qarCX/JiWIKglqbk+Wl5rmm2wk3ej/M=",
		"base64 PEM":                "LS0tLS1CRUdJTiBFRDI1NTE5IFBSSVZBVEUgS0VZLS0tLS0KTUM0Q0FRQXdCUVlESzJWd0JDSUVJQ0pWcmxMeGdhRkpYYU9oamxjOGJvbTlUMVZnWEtXa1c0VFdXWGgvKzNaZAotLS0tLUVORCBFRDI1NTE5IFBSSVZBVEUgS0VZLS0tLS0K",
		"PEM body line":             "MIIBfzCCASSgAwIBAgIRAKXyUp4lTl8Ixoybf+Ra0A4wCgYIKoZIzj0EAwIwDzEN",
	} {
		for _, wrap := range []string{`token: %s`, `"%s"`, `secret=%s;`, `%s`} {
			text := "Error: rejected\n  " + strings.Replace(wrap, "%s", secret, 1) + "\nwith sim_machine.ng_workers[0]\n"
			want := "Error: rejected\n  " + strings.Replace(wrap, "%s", redact.Mark, 1) + "\nwith sim_machine.ng_workers[0]\n"
			if got := redact.Text(text); got != want {
				t.Errorf("%s in %q:\n got %q\nwant %q", name, wrap, got, want)
			}
		}
	}
}

// TestTextKeepsOrdinaryOutput leaves what tofu prints about resources as
// it is: addresses, ids, digests, paths, versions, checksums.
func TestTextKeepsOrdinaryOutput(t *testing.T) {
	for _, s := range []string{
		"terraform_data.talos_bundle: Creation complete after 0s [id=7a7bf0dd-8041-d55b-cc68-bdc04c482619]",
		"rezussim_machine.ng_workers[1]: Destroying... [id=staging-workers-1-5f0c1e2a]",
		"module.tenant.openstack_compute_instance_v2.ng_controlplane[\"0\"]: Still creating... [10s elapsed]",
		"config_hash = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"",
		"sha512 = \"cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e\"",
		"Error: open /tmp/TestSecretsThroughTheAPI2871638/001/data/work/production/terraform/plugins/registry: no such file",
		"ocid1.instance.oc1.phx.anyhqljtnlpcvuiaxkrauyzqftwkwsqlrvexsbvkaou3ud4ozwvxgbetslyq",
		"- registry.opentofu.org/rezuscloud/rezussim v0.1.204380986 (h1:9IVmSdqDPjnFTyvKfCmDDRtEcvtjKeQIrYvaxKpsdxM=)",
		"Plan: 2 to add, 0 to change, 1 to destroy, 1 to forget.",
		"OpenTofu v1.10.10 on linux_amd64; talos v1.12.6, kubernetes v1.35.0",
		"address = \"127.1.0.12\" hostname = \"production-controlplane-0.example.internal\"",
		"ThisIsAVeryLongIdentifierWithoutAnyDigitsInItThatGoesOnAndOnAndOnForever",
		"rezuscloud: pushed errored.tfstate (serial 7, lineage aa1fe1e1-b617-8c39-b8e8-e7f1d306587d)",
	} {
		if got := redact.Text(s); got != s {
			t.Errorf("redacted ordinary output:\n got %q\nwant %q", got, s)
		}
	}
}

// TestKnownValues removes given values wherever they are, also inside
// words, and ignores values too short to be secrets.
func TestKnownValues(t *testing.T) {
	r := redact.New("hunter2-password", "abc", "", "hunter2-password-and-more")
	got := r.String("user=admin pass=hunter2-password-and-more old=hunter2-password abc")
	want := "user=admin pass=" + redact.Mark + " old=" + redact.Mark + " abc"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var none *redact.Redactor
	if got := none.String("token ko2m88.5akwd6kihwh6kyfp"); got != "token "+redact.Mark {
		t.Errorf("a nil Redactor: %q", got)
	}
}

// TestTextIdempotent redacts its own output to the same text.
func TestTextIdempotent(t *testing.T) {
	y, err := yaml.Marshal(testBundle(t, "1.12.6"))
	if err != nil {
		t.Fatal(err)
	}
	once := redact.Text(destroyOutput(string(y)))
	if twice := redact.Text(once); twice != once {
		t.Errorf("a second redaction changed the text:\n%s\n---\n%s", once, twice)
	}
}

func BenchmarkText(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 16<<10 {
		sb.WriteString("rezussim_machine.ng_workers[1]: Still creating... [10s elapsed] [id=7a7bf0dd-8041-d55b-cc68-bdc04c482619]\n")
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		redact.Text(text)
	}
}
