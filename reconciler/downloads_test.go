package reconciler

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// stateCA reads the tenant's Kubernetes CA from its TF state as the backend
// stores it.
func stateCA(t *testing.T, r *rig, tenant string) *x509.Certificate {
	t.Helper()
	var raw []byte
	if err := r.srv.Store().View(func(tx store.Tx) error {
		raw = append([]byte(nil), store.CurrentState(tx, tenant)...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bundle, encrypted, err := secretsFromStateFile(raw)
	if err != nil || encrypted || bundle == nil {
		t.Fatalf("no secrets bundle in %s's state (encrypted %v): %v", tenant, encrypted, err)
	}
	k8sCA, _, err := talos.CACertificates(bundle)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(k8sCA)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func kubeconfigCert(t *testing.T, kc []byte) *x509.Certificate {
	t.Helper()
	var doc struct {
		Users []struct {
			User struct {
				Cert string `json:"client-certificate-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(kc, &doc); err != nil || len(doc.Users) != 1 {
		t.Fatalf("kubeconfig does not parse: %v", err)
	}
	der, err := base64.StdEncoding.DecodeString(doc.Users[0].User.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(der)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestSecretsStableAndDownloads(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	ca := stateCA(t, r, "production")

	kc, err := r.rec.Kubeconfig(context.Background(), "production")
	if err != nil {
		t.Fatal(err)
	}
	cert := kubeconfigCert(t, kc)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("kubeconfig client certificate does not verify against the CA in state: %v", err)
	}
	if cert.Subject.CommonName != "admin" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("client certificate subject %v, want CN admin O system:masters", cert.Subject)
	}
	if !strings.Contains(string(kc), "https://127.250.0.1:6443") {
		t.Error("kubeconfig does not point at the control-plane endpoint")
	}

	// A machine's config is its node group's: a worker's carries the worker
	// patch, and it is a worker config.
	ms := r.machines()
	var worker, cp string
	for id, m := range ms {
		if m.Spec.Tenant == "production" && m.Spec.Role == schema.RoleWorker {
			worker = id
		}
		if m.Spec.Tenant == "production" && m.Spec.Role == schema.RoleControlPlane {
			cp = id
		}
	}
	cfg, err := r.rec.MachineConfig(context.Background(), "production", worker)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "type: worker") || !strings.Contains(string(cfg), "node.example.internal/pool") {
		t.Errorf("worker %s config lacks its role or patch", worker)
	}
	if _, err := r.rec.MachineConfig(context.Background(), "staging", worker); err == nil {
		t.Error("a production machine's config was served under staging")
	}
	tc, err := r.rec.Talosconfig(context.Background(), "production")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tc), ms[cp].Spec.ManagementAddress) {
		t.Errorf("talosconfig lacks control-plane endpoint %s", ms[cp].Spec.ManagementAddress)
	}

	// Scale, then restart (a new reconciler, empty caches, same store): the
	// CA stays, and nothing runs.
	scaled := examples(t)
	f := "production/nodegroups.yaml"
	scaled[f].Data = []byte(strings.Replace(string(scaled[f].Data), "count: 2", "count: 3", 1))
	mustSucceed(t, r.reconcile("rev2", "scale", scaled))
	if !stateCA(t, r, "production").Equal(ca) {
		t.Fatal("the cluster CA changed with a scale change")
	}
	rec2, err := New(r.srv.Store(), r.rec.Runner(), render.Builtin(), r.rec.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec2.Close)
	r.rec.Close()
	r.rec = rec2
	runs := rec2.Runner().Runs()
	mustSucceed(t, r.reconcile("rev2", "scale", scaled))
	if rec2.Runner().Runs() != runs {
		t.Error("a restart with nothing changed ran tofu")
	}
	if !stateCA(t, r, "production").Equal(ca) {
		t.Fatal("the cluster CA changed across a restart")
	}
	kc2, err := rec2.Kubeconfig(context.Background(), "production")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfigCert(t, kc2).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("after a restart the kubeconfig no longer verifies: %v", err)
	}
}
