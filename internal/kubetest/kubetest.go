// Package kubetest starts, for a test, a tenant's real Kubernetes control
// plane (internal/sim/kubeapi) from a new Talos secrets bundle, on a
// loopback address of its own. Only tests import it.
package kubetest

import (
	"context"
	"crypto/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// Cluster is a started control plane and the bundle it was made from.
type Cluster struct {
	*kubeapi.ControlPlane
	// Bundle is the secrets bundle as the reconciler keeps it; Secrets
	// is it parsed.
	Bundle  []byte
	Secrets *secrets.Bundle
	// Options are those it was started with: start it again with them.
	Options kubeapi.Options
}

// Bundle returns a new secrets bundle and its parsed form.
func Bundle(t testing.TB) ([]byte, *secrets.Bundle) {
	t.Helper()
	b, err := talos.GenerateSecrets("v1.12.6", time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := talos.ParseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// Start starts a control plane at a random address of 127.block.0.0/16,
// stopped when the test ends. Each test package gives a block of its own,
// so that test processes running at once never share an address.
func Start(t testing.TB, block byte) *Cluster {
	t.Helper()
	return StartWith(t, block, nil)
}

// StartWith is Start with extra kube-apiserver arguments.
func StartWith(t testing.TB, block byte, apiServerArgs []string) *Cluster {
	t.Helper()
	b, s := Bundle(t)
	var r [2]byte
	_, _ = rand.Read(r[:])
	o := kubeapi.Options{Bin: testenv.KubeBin(t), Dir: t.TempDir(), Address: netip.AddrFrom4([4]byte{127, block, r[0], r[1]%250 + 1}),
		CA: s.Certs.K8s, ServiceAccountKey: s.Certs.K8sServiceAccount.Key, APIServerArgs: apiServerArgs}
	cp, err := kubeapi.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	return &Cluster{ControlPlane: cp, Bundle: b, Secrets: s, Options: o}
}
