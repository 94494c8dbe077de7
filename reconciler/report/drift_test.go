package report

import (
	"strings"
	"testing"
)

func TestDriftStatus(t *testing.T) {
	sha := strings.Repeat("a", 40)
	msg := "drifted from revision aaaaaaaaaaaa: " + strings.Repeat("rezussim_machine.ng_workers[0] was deleted; ", 10)
	st := DriftStatus("east", "staging", sha, true, msg, "")
	if st.Context != "rezuscloud/east/staging/drift" || st.State != StateFailure || len([]rune(st.Description)) > MaxDescription ||
		!strings.HasPrefix(st.Description, "drifted from revision") {
		t.Fatalf("drifted: %+v", st)
	}
	if err := st.validate(); err != nil {
		t.Fatal(err)
	}
	if st := DriftStatus("east", "staging", sha, false, "", ""); st.State != StateSuccess || st.Context != DriftContext("east", "staging") {
		t.Fatalf("clean: %+v", st)
	}
}
