package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBench_RefusesFlagsThatDoNotGoTogether: the shape of a run is checked
// before anything is touched, with the flag named.
func TestBench_RefusesFlagsThatDoNotGoTogether(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-ordered", "-partitioned"}, "-partitioned"},
		{[]string{"-mode", "steady", "-burst"}, "-burst"},
		{[]string{"-replicas", "0"}, "-replicas"},
		{[]string{"-replicas", "65"}, "-replicas"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"bench"}, tt.args...),
			[]string{"DATABASE_URL=postgres://127.0.0.1:1/db", "NATS_URL=nats://127.0.0.1:1"}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want %d naming %s", tt.args, code, stderr.String(), exitUsage, tt.want)
		}
	}
}
