package schema

import (
	"testing"
	"time"
)

func TestConditionsSetMovesTransitionTimeOnlyOnStatusChange(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	var cs Conditions
	cs = cs.Set(Condition{Type: ConditionReady, Status: ConditionFalse, Reason: "Applying"}, t0)
	cs = cs.Set(Condition{Type: ConditionStalled, Status: ConditionFalse}, t0)
	cs = cs.Set(Condition{Type: ConditionReady, Status: ConditionFalse, Reason: "Retrying", Message: "lock held"}, t1)
	if c := cs.Get(ConditionReady); !c.LastTransitionTime.Equal(t0) || c.Reason != "Retrying" || c.Message != "lock held" {
		t.Fatalf("same status, new reason: got %+v, want transition %v kept and reason updated", c, t0)
	}
	cs = cs.Set(Condition{Type: ConditionReady, Status: ConditionTrue, Reason: "Applied"}, t2)
	if c := cs.Get(ConditionReady); !c.LastTransitionTime.Equal(t2) || c.Status != ConditionTrue {
		t.Fatalf("status change: got %+v, want transition %v", c, t2)
	}
	if len(cs) != 2 || cs[0].Type != ConditionReady || cs[1].Type != ConditionStalled {
		t.Fatalf("order or length changed: %+v", cs)
	}
	if !cs.IsTrue(ConditionReady) || cs.IsTrue(ConditionStalled) || cs.IsTrue(ConditionDrifted) {
		t.Fatalf("IsTrue wrong on %+v", cs)
	}
	cs = cs.Remove(ConditionStalled)
	if cs.Get(ConditionStalled) != nil || len(cs) != 1 {
		t.Fatalf("Remove left %+v", cs)
	}
}
