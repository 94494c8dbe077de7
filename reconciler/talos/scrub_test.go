package talos

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestScrubbedKeepsTheStatus: a machine's answer loses the tenant's
// secrets from its text and keeps its gRPC status; another tenant's
// answers and answers without a secret stay as they are.
func TestScrubbedKeepsTheStatus(t *testing.T) {
	pl := &Plane{}
	pl.setScrub("acme", strings.NewReplacer("s3cr3t", "<encrypted>").Replace)
	err := status.Error(codes.AlreadyExists, `field "password": value "s3cr3t" is invalid`)
	got := pl.scrubbed("acme", err)
	if strings.Contains(got.Error(), "s3cr3t") || !strings.Contains(got.Error(), "<encrypted>") || status.Code(got) != codes.AlreadyExists || !errors.Is(got, err) {
		t.Errorf("scrubbed: %q (code %s), want the secret replaced and the status kept", got, status.Code(got))
	}
	if got := pl.scrubbed("other", err); got != err {
		t.Errorf("another tenant's answer changed: %v", got)
	}
	plain := errors.New("unavailable")
	if got := pl.scrubbed("acme", plain); got != plain {
		t.Errorf("an answer without a secret changed: %v", got)
	}
	pl.setScrub("acme", nil)
	if got := pl.scrubbed("acme", err); got != err {
		t.Errorf("after the scrub is forgotten: %v", got)
	}
}

// TestRollScrubsWhatReachesItsErrors: what a call answers reaches the
// rollout's error scrubbed (here the gate's refusal, which comes back
// through the call to the machine).
func TestRollScrubsWhatReachesItsErrors(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	opts := r.opts
	opts.Gate = func() error { return errors.New("the password s3cr3t") }
	r.plane = r.newPlane(opts)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")
	d.Scrub = strings.NewReplacer("s3cr3t", "<encrypted>").Replace
	_, err := r.plane.Roll(ctxT(t), d)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "the password <encrypted>") {
		t.Fatalf("Roll: %v, want the answer with the secret scrubbed", err)
	}
	rec, _, err := r.plane.Rollout("acme")
	if b, _ := json.Marshal(rec); err != nil || strings.Contains(string(b), "s3cr3t") {
		t.Errorf("the rollout record holds the secret (%v): %s", err, b)
	}
}
