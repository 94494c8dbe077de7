package talos

import (
	"fmt"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// validationBundles holds one throwaway secrets bundle per version contract.
var validationBundles sync.Map // contract ("v1.12") -> *validationBundle

type validationBundle struct {
	once sync.Once
	b    []byte
	err  error
}

// ValidationSecrets returns a throwaway secrets bundle for talosVersion, for
// checking machine configs before a tenant has secrets of its own: its keys
// protect nothing and never reach a machine. A bundle depends only on the
// version contract (the minor version), so one is made per contract, dated
// at the Unix epoch, the first time it is asked for, and later calls
// return the same bytes, which MachineConfig parses only once. Its
// service-account key is ECDSA, made in a millisecond where an RSA-4096
// key takes about a second: Talos accepts either in every config.
func ValidationSecrets(talosVersion string) ([]byte, error) {
	contract, err := parseContract(talosVersion)
	if err != nil {
		return nil, err
	}
	v, _ := validationBundles.LoadOrStore(contract.String(), &validationBundle{})
	vb := v.(*validationBundle)
	vb.once.Do(func() {
		vb.b, vb.err = GenerateSecrets(talosVersion, time.Unix(0, 0).UTC(), schema.ServiceAccountKeyECDSA)
		if vb.err == nil {
			rememberValidationBundle(vb.b)
		}
	})
	return vb.b, vb.err
}

// PrepareValidationSecrets starts making, in the background, the bundle
// that ValidationSecrets returns for the newest Talos version this build
// renders, so that the first validation of a fleet does not wait for it.
func PrepareValidationSecrets() {
	go func() { _, _ = ValidationSecrets(fmt.Sprintf("%d.%d.0", newestContract.Major, newestContract.Minor)) }()
}
