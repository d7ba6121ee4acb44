// Package webhook delivers outbox messages as HTTP POST requests to one
// URL, signed as Standard Webhooks v1 (https://www.standardwebhooks.com).
//
// # What is sent
//
// The body is the row's payload, byte for byte. The request carries:
//
//	webhook-id         the row's idempotency key, verbatim: the same on every retry
//	webhook-timestamp  unix seconds of this attempt
//	webhook-signature  "v1,<base64 HMAC-SHA256(secret, id + "." + timestamp + "." + body)>",
//	                   one per configured secret, separated by spaces (key rotation)
//	Idempotency-Key    the idempotency key again, for receivers that use that header
//	Outbox-Topic       the row's topic (the event type)
//	User-Agent         Config.UserAgent
//	Content-Type       see below
//
// and the row's headers (traceparent, tracestate, … unchanged), except those
// a row can never set: the hop-by-hop and framing headers (Connection,
// Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Expect, Host,
// Content-Length) and the ones above other than Content-Type. Those are
// dropped from the row's headers; the sink's own values stand.
//
// The signature is computed right before each attempt, so its timestamp is
// always fresh, while webhook-id never changes: receivers verify the
// signature, reject stale timestamps and drop a webhook-id they have already
// processed.
//
// # Content-Type
//
// The row's content-type header when it has one; otherwise application/json
// when the payload is valid JSON (encoding/json's Valid), and
// application/octet-stream for anything else, including an empty payload.
// Rows that carry text or another JSON media type (application/cloudevents+json)
// should say so in their headers.
//
// # Outcomes
//
//	2xx                                      delivered
//	400 410 413 415 422 431                  permanent: dead-lettered at once, with the
//	                                         status and the start of the response body
//	401 403 404                              transient: retried with backoff
//	408 425 429 5xx, other 4xx               transient: retried with backoff
//	3xx                                      transient: redirects are not followed
//	timeout, connection error                transient
//	failed TLS handshake                     transient (and logged at error level)
//	context ended during the request         transient (never delivered)
//	failed during an outage (see Pauses)     not attempted (sinks.ErrNotAttempted)
//
// Redirects are not followed, so that a signed payload never goes to a URL
// the operator did not configure (and a 301/302 would turn the POST into a
// GET). A redirect says something about the endpoint's configuration, not
// about the message, so it is transient rather than permanent: the rows wait
// with backoff while the operator fixes WEBHOOK_URL (the error names the
// Location), instead of all going to the dead letters at once. They still go
// there after RELAY_MAX_ATTEMPTS. 401, 403 and 404 are transient for the same
// reason: they say the secret, the URL or a permission is wrong on the
// receiving side, for every message alike, so the rows wait (visible in the
// backlog and retry metrics) and flow once it is fixed, instead of each
// being dead-lettered after one attempt. Other 4xx codes outside the
// permanent list are transient too.
//
// A permanent error's text holds the status and at most 512 bytes of the
// response body, as valid UTF-8 with control characters replaced by spaces.
//
// # Pauses
//
// The sink tells a message's own failure from an outage of the endpoint by
// what happens to every request rather than to one (pause.go):
//
//   - The endpoint is down when 5 requests in a row get no response (a
//     connection error, a failed TLS handshake, a timeout) or a 5xx without
//     Retry-After. Any other answer (2xx, 4xx) resets the count: a 5xx for
//     some messages while others succeed is theirs. The circuit breaker then
//     opens: the sink pauses for 1s.
//   - A Retry-After header on a transient response (delta-seconds or an
//     HTTP-date, clamped to [0, Config.MaxRetryAfter]) makes that message's
//     error carry the delay (sinks.RetryAfter): that message (and, in
//     ordered mode, its key) waits, others go on. Only when at least half of
//     the last 20 responses (and at least 10) asked to retry later — a rate
//     limit on the whole endpoint — does the whole sink pause until the last
//     one's time.
//
// While paused, Available returns an error, so the relay claims nothing for
// the sink, and Deliver sends nothing, reporting every message as not
// attempted (sinks.ErrNotAttempted), which puts rows back without spending
// attempts. A request in flight when a pause began is reported not
// attempted too, whatever it got: the pause accounts for the outage. Only
// the requests that showed the outage spend their messages' attempts.
//
// When a pause ends, one request probes the endpoint, and every other
// request waits for its result (Available reports the sink unavailable
// meanwhile). The probe carries the message of its batch tried the fewest
// times that has not already failed as a probe in this outage (probe.go),
// so that probes go round the waiting messages. If the endpoint answers it
// with anything but a 5xx or a Retry-After, the breaker closes and the
// others go. If not, the sink pauses again, for twice the last pause (up to
// 30s) or the probe's Retry-After if longer. The probe spends its message's
// attempt only when its failure may be that message's doing (no response
// after the request was sent, a 5xx other than 503), so that a message that
// crashes the receiver still reaches the dead letters; a probe that was
// never sent (a refused connection, a failed TLS handshake) or was answered
// 503 or 429 is reported not attempted. A dead endpoint thus costs the few
// attempts that found it down, and is used again within 30s of coming
// back. A request interrupted by its caller's context says nothing about
// the endpoint.
//
// # TLS
//
// An https URL is verified against the system roots, or, when
// Config.TLSCAFile is set, against that file's CA certificates only: a
// private CA replaces the system roots rather than adding to them, so that
// no public CA can stand in for the endpoint. Config.TLSCertFile and
// Config.TLSKeyFile give a client certificate for endpoints that require
// one (mutual TLS). New reads the files once.
//
// A handshake that fails (a certificate that does not verify, an endpoint
// that wants a client certificate) fails every message alike: it is
// transient, never permanent, so no row is dead-lettered for it, and it
// counts towards the circuit breaker, whose pause (Available's error) quotes
// it. It is logged at error level once, not once per request, again only
// when the reason changes, and its end at info.
//
// # Limits
//
// Every request is bounded by Config.Timeout. At most Config.Concurrency
// requests are in flight for the whole sink, however many Deliver calls run
// at once. Deliver starts no request when its context's deadline is closer
// than Config.Timeout (it could not finish in time); such messages, and those
// left when the context ends or a pause begins, are reported not attempted.
//
// Payloads and secrets are never logged; Secret values print as redacted.
package webhook
