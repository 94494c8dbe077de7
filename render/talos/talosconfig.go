package talos

import (
	"errors"
	"fmt"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// TalosconfigValidity is how long the client certificate in a talosconfig
// is valid: one year, as talosctl issues it.
const TalosconfigValidity = constants.TalosAPIDefaultCertificateValidityDuration

// Talosconfig returns a talosconfig (talosctl's client config) with one
// context named clusterName: the given control-plane endpoints (addresses or
// host names, possibly none yet), the bundle's OS CA, and a client
// certificate for the os:admin role signed by that CA, valid from now for
// TalosconfigValidity. Each call issues a new key.
func Talosconfig(clusterName string, endpoints []string, secretsBundle []byte, now time.Time) ([]byte, error) {
	if clusterName == "" {
		return nil, errors.New("talosconfig: cluster name: empty")
	}
	for i, e := range endpoints {
		if e == "" {
			return nil, fmt.Errorf("talosconfig: endpoint %d: empty", i)
		}
	}
	bundle, err := ParseSecrets(secretsBundle)
	if err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	bundle.Clock = secrets.NewFixedClock(now)
	client, err := bundle.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), TalosconfigValidity)
	if err != nil {
		return nil, fmt.Errorf("talosconfig: client certificate: %w", err)
	}
	cfg := clientconfig.NewConfig(clusterName, append([]string{}, endpoints...), bundle.Certs.OS.Crt, client)
	out, err := cfg.Bytes()
	if err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	return out, nil
}
