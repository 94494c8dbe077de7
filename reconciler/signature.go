package reconciler

import (
	"context"
	"fmt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// verifySignature records the outcome of the commit's signature check
// (the source made it when the server verifies signatures) and refuses a
// commit whose signature is missing or not made by a trusted key: the
// revision stalls before anything of it runs, and the last good commit
// stays applied.
func (run *CommitRun) verifySignature(context.Context) (stepResult, error) {
	sig := commitSignature(run.snap.Signature)
	if sig == nil {
		return stepNext, nil
	}
	run.commit.Status.Signature = sig
	if sig.Verified {
		return stepNext, nil
	}
	sig.Refused = true
	run.r.log.Warn("commit refused: its signature is not verified", "revision", run.snap.Revision,
		"type", sig.Type, "key", sig.Key, "reason", sig.Reason)
	return stepNext, stall(schema.ReasonUnverifiedSignature,
		fmt.Errorf("%s; --verify-signatures refuses it: nothing was applied, the last good commit stays in effect", signatureText(sig)))
}

// commitSignature copies a snapshot's signature check into a Commit's
// status; nil when the source checked none.
func commitSignature(s *sources.Signature) *schema.CommitSignature {
	if s == nil {
		return nil
	}
	return &schema.CommitSignature{Type: s.Type, Key: s.Key, Signer: s.Signer, Verified: s.Verified, Reason: s.Reason}
}

// signatureText says in words who signed, with which key, and why the
// signature is not trusted.
func signatureText(s *schema.CommitSignature) string {
	if s.Type == "" {
		return "the commit is not signed"
	}
	who := ""
	if s.Signer != "" {
		who = " of " + s.Signer
	}
	return fmt.Sprintf("the commit has a %s signature by key %s%s that is not trusted: %s", s.Type, s.Key, who, s.Reason)
}

// noteUnverified adds to a finished preview's message that its signature
// is not verified, so that its status and forge report say so: the main
// ref would refuse it.
func noteUnverified(c *schema.Commit) {
	s := c.Status.Signature
	if s == nil || s.Verified {
		return
	}
	note := signatureText(s) + "; as the main ref it would be refused"
	if s.Type == "" {
		note = "unsigned: " + note
	}
	if c.Status.Message != "" {
		note = c.Status.Message + "; " + note
	}
	c.Status.Message = note
}
