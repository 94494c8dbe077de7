package simobserve

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

func TestSimStages(t *testing.T) {
	for age, want := range map[time.Duration]schema.MachineStage{
		0: schema.StageInitializing, 4 * time.Second: schema.StageInstalling,
		7 * time.Second: schema.StageConfiguring, time.Minute: schema.StageReady,
	} {
		if got := Stage(age); got != want {
			t.Errorf("age %v: stage %s, want %s", age, got, want)
		}
	}
}
