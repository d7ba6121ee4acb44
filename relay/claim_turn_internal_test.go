package relay

import (
	"context"
	"testing"
	"time"
)

// A relay's claim loops take turns where a mode asks for it (claimTurn):
// unordered mode's while a backlog drains, ordered mode's claims of heads.
// A loop waiting for its turn when shutdown begins claims nothing: it used
// to wait on a mutex that knew nothing of the shutdown, and claimed rows
// once the other loop's claim ended, inside the shutdown's grace, which
// the drain then had to deliver or release.
func TestClaimTurn_AClaimWaitingForItsTurnWhenShutdownBeginsClaimsNothing(t *testing.T) {
	// No engine: a claim that ran would panic.
	unordered := &unordered{claiming: newClaimTurn()}
	unordered.draining.Store(true)
	ordered := &ordered{claimingHeads: newClaimTurn()}
	for _, c := range []struct {
		name  string
		turn  claimTurn
		claim func(context.Context, claimRequest) ([]claimedRow, error)
	}{
		{"unordered, draining", unordered.claiming, unordered.claimRows},
		{"ordered, heads of keys", ordered.claimingHeads, ordered.claimHeadsOfKeys},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.turn <- struct{}{} // the other loop's claim is under way
			stopping := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				batch, err := c.claim(context.Background(), claimRequest{limit: 1000, stopping: stopping})
				if err == nil && len(batch) > 0 {
					t.Errorf("claimed %d rows", len(batch))
				}
				done <- err
			}()
			select {
			case <-done:
				t.Fatal("the claim did not wait for its turn")
			case <-time.After(50 * time.Millisecond):
			}
			close(stopping)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("a claim stopped by the shutdown returned %v, want no error and no rows", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the claim still waits for its turn 10 s after shutdown began")
			}
			// The other loop's claim still holds the turn.
			if len(c.turn) != 1 {
				t.Errorf("the turn holds %d, want the other loop's 1", len(c.turn))
			}
		})
	}
}
