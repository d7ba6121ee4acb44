package cli

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
)

// TestProcess_GoCollectorSettings: the binary runs Go's collector at
// GOGC=400 unless GOGC is set, and leaves a GOMEMLIMIT it is given alone,
// as /metrics shows (go_gc_gogc_percent, go_gc_gomemlimit_bytes).
func TestProcess_GoCollectorSettings(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	for _, c := range []struct {
		name     string
		env      []string
		gogc     float64
		memLimit float64
		checkMem bool
	}{
		{name: "defaults", gogc: 400},
		{name: "GOGC set", env: []string{"GOGC=150"}, gogc: 150},
		{name: "GOMEMLIMIT set", env: []string{"GOMEMLIMIT=100MiB"}, gogc: 400, memLimit: 100 << 20, checkMem: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startProcess(t, relayEnv(db, srv, c.env...)...)
			m := p.metrics()
			if got := metricValue(m, "go_gc_gogc_percent"); got != c.gogc {
				t.Errorf("go_gc_gogc_percent = %v, want %v", got, c.gogc)
			}
			if got := metricValue(m, "go_gc_gomemlimit_bytes"); c.checkMem && got != c.memLimit {
				t.Errorf("go_gc_gomemlimit_bytes = %v, want %v", got, c.memLimit)
			}
		})
	}
}
