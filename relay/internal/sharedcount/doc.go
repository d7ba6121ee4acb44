// Package sharedcount lets the relays of one schema take turns counting
// what their gauges show, so that the database counts it once per
// interval, not once per relay.
//
// # Why
//
// The backlog and table-health gauges count rows: every due row, up to a
// million, through the due index and the heap. On a backlog of 200,000
// rows one count costs PostgreSQL about a second of CPU, as much as
// claiming a few thousand rows, and every relay of the schema made it
// every RELAY_STATS_INTERVAL: four replicas, four counts of the same rows,
// when the database is busiest.
//
// # The protocol
//
// The schema holds one row of readings (migration 27, gauge_readings):
// when the last count began (counted_at), until when the relay counting
// now keeps its turn (counting_until), who counted (counted_by) and what it
// read (readings, a JSON document the caller defines). Every Interval each
// relay runs a round, one statement (queryRound) that does both:
//
//   - it takes the turn when the last count began at least nine tenths of
//     an interval ago and nobody holds the turn: it sets counting_until to
//     three intervals from now (holdFor: a count of a huge backlog may
//     take most of an interval). Of relays that try at once, PostgreSQL's row
//     lock lets one take it; the others find counting_until set when they
//     read the row again after its lock.
//   - it reads the readings stored, and how old they are.
//
// The relay whose turn it is counts (Hooks.Count) and stores what it read
// with the time its round began (queryStore); the others use the stored
// readings (Hooks.Use, with their age). A count that fails gives the turn
// back (queryRelease). A relay that dies while it counts keeps the turn
// for three intervals at most; then the next relay's round takes it. A
// count stored after its turn ran out leaves the next holder's turn alone.
// A relay that cannot run the round (the table unreadable) counts for
// itself, and reports the error.
//
// So the gauges of every relay of a schema show counts about two intervals
// old at most while the relays live (nine tenths of one before a relay
// takes the turn, and up to one until a relay's next round; more while the
// turn of a relay that died runs out), and the database counts about once
// per interval, however many relays there are. A relay alone counts every
// round, as before.
//
// A relay that finds no readings stored yet while another counts (the
// schema's first count: relays that start together) waits for them, up to
// an interval, rather than count the same rows again.
package sharedcount
