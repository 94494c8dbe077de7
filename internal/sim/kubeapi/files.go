package kubeapi

import (
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
)

// files are the paths of what writeFiles wrote.
type files struct {
	caCrt, caKey, saKey         string
	servingCrt, servingKey      string
	controllerManagerKubeconfig string
	schedulerKubeconfig         string
}

// Names of the identities the control plane's own components use, as
// Kubernetes's bootstrap RBAC policy knows them.
const (
	apiserverName         = "kube-apiserver"
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
)

// validity of the certificates the control plane issues itself; they are
// issued again at every start.
const validity = 365 * 24 * time.Hour

// writeFiles writes the CA, the service-account key, a serving certificate
// for the API and a kubeconfig for the controller-manager into the
// control plane's directory (0600). The certificates are issued again at
// every start, so that a changed address or CA takes effect.
func writeFiles(o Options) (files, error) {
	dir := filepath.Join(o.Dir, "pki")
	f := files{
		caCrt: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"), saKey: filepath.Join(dir, "sa.key"),
		servingCrt: filepath.Join(dir, "apiserver.crt"), servingKey: filepath.Join(dir, "apiserver.key"),
		controllerManagerKubeconfig: filepath.Join(dir, "controller-manager.kubeconfig"),
		schedulerKubeconfig:         filepath.Join(dir, "scheduler.kubeconfig"),
	}
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(o.CA)
	if err != nil {
		return f, fmt.Errorf("kubeapi: cluster CA: %w", err)
	}
	serviceIP := o.ServiceCIDR.Addr().Next() // the "kubernetes" Service's address
	serving, err := sx509.NewKeyPair(ca,
		sx509.CommonName(apiserverName),
		sx509.IPAddresses([]net.IP{o.Address.AsSlice(), net.IPv4(127, 0, 0, 1), serviceIP.AsSlice()}),
		sx509.DNSNames([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"}),
		sx509.NotAfter(time.Now().Add(validity)),
		sx509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return f, fmt.Errorf("kubeapi: serving certificate: %w", err)
	}
	url := "https://" + net.JoinHostPort(o.Address.String(), strconv.Itoa(o.Port))
	out := map[string][]byte{
		f.caCrt: o.CA.Crt, f.caKey: o.CA.Key, f.saKey: o.ServiceAccountKey,
		f.servingCrt: serving.CrtPEM, f.servingKey: serving.KeyPEM,
	}
	for path, user := range map[string]string{f.controllerManagerKubeconfig: controllerManagerUser, f.schedulerKubeconfig: schedulerUser} {
		kc, err := ClientKubeconfig(url, ca, user)
		if err != nil {
			return f, err
		}
		out[path] = kc
	}
	for path, b := range out {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return f, err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// ClientKubeconfig is a kubeconfig for url whose client certificate,
// issued by ca, names user and groups.
func ClientKubeconfig(url string, ca *sx509.CertificateAuthority, user string, groups ...string) ([]byte, error) {
	pair, err := ClientCertificate(ca, user, groups...)
	if err != nil {
		return nil, err
	}
	return kubeconfig(url, ca.CrtPEM, pair.CrtPEM, pair.KeyPEM), nil
}

// ClientCertificate is a client certificate issued by ca for user in
// groups.
func ClientCertificate(ca *sx509.CertificateAuthority, user string, groups ...string) (*sx509.KeyPair, error) {
	pair, err := sx509.NewKeyPair(ca,
		sx509.CommonName(user),
		sx509.Organization(groups...),
		sx509.NotAfter(time.Now().Add(validity)),
		sx509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: a client certificate for %s: %w", user, err)
	}
	return pair, nil
}

// kubeconfig is a kubeconfig of one cluster and one user with a client
// certificate, whose PEM blocks it holds base64-encoded.
func kubeconfig(server string, ca, crt, key []byte) []byte {
	b64 := base64std
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: component
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: component@sim
  context: {cluster: sim, user: component}
current-context: component@sim
`, server, b64(ca), b64(crt), b64(key))
}
