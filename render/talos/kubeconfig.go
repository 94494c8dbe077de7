package talos

import (
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"sigs.k8s.io/yaml"
)

// Subject of the client certificate in the admin kubeconfig: the user
// "admin" in the group that Kubernetes binds to cluster-admin.
const (
	KubernetesAdminUser  = constants.KubernetesAdminCertCommonName   // "admin"
	KubernetesAdminGroup = constants.KubernetesAdminCertOrganization // "system:masters"
)

// Kubeconfig returns an admin kubeconfig for the cluster: server endpoint
// (the control plane endpoint URL), trusting the bundle's Kubernetes CA, and
// a client certificate signed by that CA for user admin in group
// system:masters, valid from now for validity. Each call issues a new key.
//
// The cluster, user and context are named clusterName, admin@clusterName and
// admin@clusterName, as `talosctl kubeconfig` names them.
func Kubeconfig(clusterName, endpoint string, secretsBundle []byte, validity time.Duration, now time.Time) ([]byte, error) {
	if clusterName == "" {
		return nil, errors.New("kubeconfig: cluster name: empty")
	}
	if endpoint == "" {
		return nil, errors.New("kubeconfig: endpoint: empty")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("kubeconfig: validity %s: must be positive", validity)
	}
	admin, err := KubernetesAdmin(secretsBundle, validity, now)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	user := KubernetesAdminUser + "@" + clusterName
	kc := kubeconfig{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []namedCluster{{
			Name: clusterName,
			Cluster: kubeCluster{
				Server:                   endpoint,
				CertificateAuthorityData: admin.CA,
			},
		}},
		Users: []namedUser{{
			Name: user,
			User: kubeUser{
				ClientCertificateData: admin.Crt,
				ClientKeyData:         admin.Key,
			},
		}},
		Contexts: []namedContext{{
			Name: user,
			Context: kubeContext{
				Cluster:   clusterName,
				User:      user,
				Namespace: "default",
			},
		}},
		CurrentContext: user,
	}
	out, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return out, nil
}

// KubernetesCredential is a client certificate and key for a cluster's
// Kubernetes API, with the CA that the API's serving certificate chains to
// (all PEM).
type KubernetesCredential struct {
	CA, Crt, Key []byte
}

// KubernetesAdmin issues the cluster's admin credential from the bundle's
// Kubernetes CA: user admin in group system:masters, valid from now for
// validity, with a new key. Every admin kubeconfig and the plane's own
// client of the API hold one.
func KubernetesAdmin(secretsBundle []byte, validity time.Duration, now time.Time) (*KubernetesCredential, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("validity %s: must be positive", validity)
	}
	bundle, err := ParseSecrets(secretsBundle)
	if err != nil {
		return nil, err
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.K8s)
	if err != nil {
		return nil, fmt.Errorf("kubernetes CA: %w", err)
	}
	client, err := x509.NewKeyPair(ca,
		x509.CommonName(KubernetesAdminUser),
		x509.Organization(KubernetesAdminGroup),
		x509.NotBefore(now),
		x509.NotAfter(now.Add(validity)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &KubernetesCredential{CA: bundle.Certs.K8s.Crt, Crt: client.CrtPEM, Key: client.KeyPEM}, nil
}

// kubeconfig is the part of client-go's clientcmd/api/v1 Config that an
// admin kubeconfig uses, with the same field names. []byte fields encode as
// base64, as the *-data fields of a kubeconfig expect.
type kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string      `json:"name"`
	Cluster kubeCluster `json:"cluster"`
}

type kubeCluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string   `json:"name"`
	User kubeUser `json:"user"`
}

type kubeUser struct {
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKeyData         []byte `json:"client-key-data"`
}

type namedContext struct {
	Name    string      `json:"name"`
	Context kubeContext `json:"context"`
}

type kubeContext struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace,omitempty"`
}
