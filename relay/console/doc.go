// Package console is the relay's web console: pages an on-call engineer
// opens to see every outbox at a glance, the dead letters grouped by
// cause, what happened to one key's rows, who holds the database's xmin
// horizon and which relays are alive; and, when the operator enabled
// actions with a secret, the buttons that retry and purge dead letters and
// cancel a key's pending rows.
//
// It is served by `outbox-relay console` (from a laptop or a job, on
// loopback by default) and, when RELAY_CONSOLE is set, by a running relay
// on its HTTP port; both mount the Handler under Config.Prefix (/console).
// Every page is HTML rendered on the server from html/template, with one
// stylesheet embedded in the binary and no script at all; it reads the
// database through relay/admin, each page in a few statements that the
// indexes answer however large the archive grows.
//
// # Rows are untrusted
//
// Every value a producer wrote (topic, key, headers, payload, errors that
// quote them) is escaped by html/template; control and bidirectional
// formatting characters are shown as visible ⟨U+202E⟩ marks rather than
// obeyed; long values are cut, with their size said; payloads are shown as
// text when they are printable UTF-8 and as a hex dump otherwise, at most
// PreviewBytes of them, read so by the database. Every response carries a
// Content-Security-Policy that allows the console's own stylesheet and
// nothing else: no script runs, whatever a row holds.
//
// # Actions
//
// Without Config.Secret the console is read-only: it shows no action and
// refuses every POST with 403, and each page says so. With a secret, an
// operator signs in by typing it (POST /signin); the console then sets a
// session cookie (HttpOnly, SameSite=Strict, signed with the secret, valid
// for SessionTTL) and renders action forms. Every POST is checked three
// ways: the session cookie, a form token derived from the session
// (csrfField), and net/http's CrossOriginProtection (Sec-Fetch-Site and
// Origin), so that no other site can make a signed-in browser act. An
// action is two steps: the first POST counts what it would change (a dry
// run) and shows a confirmation; only the second, with confirm=yes,
// changes anything. Each change is logged as an audit line naming the
// outbox, the action, its selection, what it changed and the client.
package console
