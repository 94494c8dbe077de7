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
	bundle, err := ParseSecrets(secretsBundle)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.K8s)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: kubernetes CA: %w", err)
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
		return nil, fmt.Errorf("kubeconfig: client certificate: %w", err)
	}
	user := KubernetesAdminUser + "@" + clusterName
	kc := kubeconfig{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []namedCluster{{
			Name: clusterName,
			Cluster: kubeCluster{
				Server:                   endpoint,
				CertificateAuthorityData: bundle.Certs.K8s.Crt,
			},
		}},
		Users: []namedUser{{
			Name: user,
			User: kubeUser{
				ClientCertificateData: client.CrtPEM,
				ClientKeyData:         client.KeyPEM,
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
