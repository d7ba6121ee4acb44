package relay

import "github.com/outbox-relay/outbox-relay/relay/internal/buckets"

// NotifyChannel exposes notifyChannel to the external tests.
var NotifyChannel = notifyChannel

// LockBucketsRound opens a rebalancing round in a transaction, as a relay
// does (buckets.Lock).
var LockBucketsRound = buckets.Lock
