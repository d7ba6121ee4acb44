// Package listener wakes relays when producers insert (RELAY_NOTIFY).
//
// Opt-in wake-up (relay.Config.Notify): a Listener LISTENs on one dedicated
// connection per database for the NOTIFY that each schema's messages_notify
// trigger sends for every inserting statement, and wakes the claim loops of
// that schema's relay at once. Polling goes on: a notification only
// shortens the wait, and a relay whose listener lost its connection is
// woken, as inserts may have gone unheard.
//
// It imports nothing of the relay's (relay/internal, docs/development.md):
// the relay subscribes its schema (Subscribe) and waits on the Broadcast it
// gets, beside its polls.
package listener
