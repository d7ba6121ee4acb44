package relay

import (
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/buckets"
	"github.com/outbox-relay/outbox-relay/relay/internal/listener"
)

// NotifyChannel exposes listener.Channel to the external tests.
var NotifyChannel = listener.Channel

// LockBucketsRound opens a rebalancing round in a transaction, as a relay
// does (buckets.Lock).
var LockBucketsRound = buckets.Lock

// SetLivenessThreshold sets how long r's loops may work without coming
// round before r is not live (three leases, at least two minutes, by
// default), before r runs: the tests' stalls end sooner.
func SetLivenessThreshold(r *Relay, d time.Duration) {
	r.live = newLiveness(r.log, d)
	r.engine.live = r.live
}

// ChainLinks is how many links of keyed rows r holds
// (relay/internal/keychain).
func ChainLinks(r *Relay) int { return r.engine.chains.Len() }
