// Package fleet runs one relay engine (package relay) per outbox, an
// outbox being a schema of a database, so that one process serves several
// schemas of one database (RELAY_SCHEMAS), the schemas a LIKE pattern finds
// (RELAY_SCHEMA_MATCH), and the outboxes of several databases
// (RELAY_TENANTS_FILE).
//
// # Protocol
//
// Each database gets one pool, shared by every outbox in it, and with
// RELAY_NOTIFY one listening connection (relay.Listener), on which each
// outbox's relay subscribes to its schema's channel. Each outbox holds at
// most its fair share of a shared pool at once (share.go), so that
// outboxes whose statements wait on locks leave the others connections.
//
// An outbox runs on its own: it is prepared (migrated, or its version
// checked), then its relay runs until the fleet stops or the relay fails
// (a mode conflict, its registration fenced); a failure, or a database
// that does not answer, is logged and the outbox tried again after a
// growing pause, while the other outboxes go on. Nothing is shared between
// outboxes but the pool, the listener and the sinks: each relay claims,
// settles, rescues leases, repairs ordered keys, rebalances buckets, enforces
// retention and refreshes its gauges on its own schema only, so no outcome
// of one outbox is ever settled in another.
//
// A database with a schema pattern is searched again every
// Config.DiscoverEvery for the schemas that match and hold a migrated
// outbox (a schema_version and a messages table) and are owned, with their
// messages table, by a trusted owner (Trust): a new one is started, and
// one that is gone (dropped, renamed, its messages table dropped, or its
// owner no longer trusted) is stopped, which drains its relay, and its
// metrics are removed. A search that fails keeps the outboxes it knew.
//
// Metrics: each outbox has its own relay.Metrics, registered with a schema
// label, and a tenant label when the tenants are named (Config.Labelled).
//
// Readiness (Fleet.Ready): an outbox is ready when its relay is
// (relay.Relay.Ready); one that is waiting for its database, being
// prepared or waiting to be tried again is not. With ReadyWhenAny the fleet
// is ready while any outbox is (or none is served); otherwise while every
// one is.
package fleet
