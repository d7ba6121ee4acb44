package cli

import (
	"regexp"
	"strings"
)

// /readyz answers anyone who reaches the port, so its text names outboxes
// (tenant and schema), sinks and the relay's own states, never a database,
// a host or a role. PostgreSQL's messages name them ("database "orders"
// does not exist", "role "app" is not permitted to log in"), and so do
// pgx's connection errors (the user, the database, each host tried) and
// the network's (addresses): readinessText keeps of them what kind of
// failure it was and the SQLSTATE, and the log has the whole error.

// connFailure matches a pgx connection error, from its prefix ("failed to
// connect to `user=… database=…`:", or "the database" where package relay
// has taken the user and database out) to the end of the problem it is in:
// the end of the text or the next outbox of a fleet's list ("; schema …",
// "; tenant …"), which it captures to put back.
var connFailure = regexp.MustCompile("(?s)failed to connect to (?:`[^`]*`|the database):?(.*?)(; (?:tenant |schema |starting: )|$)")

// pgMessage matches a message of PostgreSQL as pgconn prints it: the
// severity, the text, and the SQLSTATE.
var pgMessage = regexp.MustCompile(`(?s)\b(?:PANIC|FATAL|ERROR|WARNING|NOTICE|DEBUG|INFO|LOG): .*?\(SQLSTATE ([0-9A-Z]{5})\)`)

// sqlState finds the first SQLSTATE in a text.
var sqlState = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// netAddress matches the addresses in a network error ("read tcp
// 10.0.0.5:41234->10.0.0.9:5432: …", "lookup db.internal on 10.0.0.10:53:
// …").
var netAddress = regexp.MustCompile(`\b(dial|read|write) (tcp[46]?|udp[46]?|unix) \S+: |\blookup \S+(?: on \S+)?: `)

// sqlStates names the SQLSTATEs a refused connection commonly has, in
// words that name nothing of the server.
var sqlStates = map[string]string{
	"3D000": "no such database",
	"28000": "authorization refused: no such role, a role that may not log in, or pg_hba.conf",
	"28P01": "authentication failed",
	"42501": "permission denied",
	"53300": "too many connections",
	"57P03": "the server is starting or shutting down",
	"57P01": "the server is shutting down",
}

// readinessText is err's text as /readyz shows it: connection errors
// reduced to their kind, PostgreSQL's messages to their SQLSTATE, network
// addresses left out.
func readinessText(err error) string {
	s := connFailure.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := connFailure.FindStringSubmatch(m)
		return "failed to connect to the database (" + connFailureKind(sub[1]) + ")" + sub[2]
	})
	s = pgMessage.ReplaceAllStringFunc(s, func(m string) string {
		return "PostgreSQL " + sqlStateText(pgMessage.FindStringSubmatch(m)[1])
	})
	return netAddress.ReplaceAllStringFunc(s, func(m string) string {
		if op, _, ok := strings.Cut(m, " "); ok && op != "lookup" {
			network, _, _ := strings.Cut(strings.TrimPrefix(m, op+" "), " ")
			return op + " " + network + ": "
		}
		return "lookup: "
	})
}

// connFailureKind says what kind of failure detail, the part of a pgx
// connection error after its prefix, is.
func connFailureKind(detail string) string {
	switch {
	case strings.Contains(detail, "server error"):
		if m := sqlState.FindStringSubmatch(detail); m != nil {
			return "the server refused it: " + sqlStateText(m[1])
		}
		return "the server refused it"
	case strings.Contains(detail, "hostname resolving error"):
		return "the host name does not resolve"
	case strings.Contains(detail, "tls error"):
		return "the TLS handshake failed"
	case strings.Contains(detail, "connection refused"):
		return "connection refused"
	case strings.Contains(detail, "timeout"), strings.Contains(detail, "deadline exceeded"):
		return "timed out"
	case strings.Contains(detail, "dial error"):
		return "the server cannot be reached"
	}
	return "see the log"
}

// sqlStateText is "SQLSTATE code", with what it means when sqlStates
// knows.
func sqlStateText(code string) string {
	if what, ok := sqlStates[code]; ok {
		return "SQLSTATE " + code + ", " + what
	}
	return "SQLSTATE " + code
}
