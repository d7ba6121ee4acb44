// Package outbox is the contract between an application and outbox-relay.
//
// An application records an event by inserting a row into <schema>.messages
// (schema "outbox" by default) inside the same transaction as the business
// change it describes. Only topic and payload are required:
//
//	INSERT INTO outbox.messages (topic, payload) VALUES ('orders.created', '{"id": 42}');
//
// The optional columns are key (ordering key), headers (a JSON object of
// strings, carried as NATS or HTTP headers), idempotency_key (generated when
// absent; unique among pending rows, so INSERT … ON CONFLICT (idempotency_key)
// DO NOTHING dedupes at the producer; a key the producer chose is also
// remembered after delivery, a generated one is not), destination (the name
// of a configured sink) and available_at (deliver not before). Every other
// column belongs to the relay.
//
// Go applications may use Insert, which writes a batch of messages in one
// statement and takes a pgx.Tx, so that it cannot be used outside a
// transaction by mistake. It needs the schema at migration 6 or later
// (outbox-relay migrate), which generates missing keys: upgrade the relay
// first.
package outbox
