package relay

// NotifyChannel exposes notifyChannel to the external tests.
var NotifyChannel = notifyChannel

// QueryBucketsLock is the statement that opens a rebalancing round.
const QueryBucketsLock = queryBucketsLock
