package relay

import "context"

// claimTurn lets one claim of a relay's loops run at a time, where a mode
// asks for it (unordered while draining, ordered's claims of heads): the
// turn is one place, taken for a claim and given back after it.
type claimTurn chan struct{}

func newClaimTurn() claimTurn { return make(claimTurn, 1) }

// take waits for the turn. It reports false, and the claim must claim
// nothing, once the relay's shutdown has begun (stopping: rows leased
// then could only be delivered in the shutdown's grace, or released); err
// is ctx's when the claim's time runs out first. A turn taken is given
// back with release.
func (t claimTurn) take(ctx context.Context, stopping <-chan struct{}) (bool, error) {
	select {
	case <-stopping: // before a free turn, which select would pick as often
		return false, nil
	default:
	}
	select {
	case t <- struct{}{}:
		return true, nil
	case <-stopping:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// release gives the turn back.
func (t claimTurn) release() { <-t }
