package cli

import (
	"errors"
	"strings"
	"testing"
)

// readinessText keeps of a connection error its kind and of PostgreSQL's
// messages their SQLSTATE: what /readyz shows names outboxes and sinks,
// never a database, a host, an address or a role.
func TestReadinessText_NamesNoDatabaseHostOrRole(t *testing.T) {
	t.Parallel()
	secret := []string{"orders_prod", "app_rw", "db.internal", "db-a", "db-b", "10.0.0.", "10.96.0.10", "127.0.0.1", "5432", "user=", "database=", `"`}
	for _, c := range []struct{ in, want string }{
		{
			"database: failed to connect to the database: 127.0.0.1:5432 (127.0.0.1): server error: FATAL: database \"orders_prod\" does not exist (SQLSTATE 3D000)",
			"database: failed to connect to the database (the server refused it: SQLSTATE 3D000, no such database)",
		},
		{
			"database: failed to connect to `user=app_rw database=orders_prod`: 10.0.0.9:5432 (db.internal): server error: FATAL: role \"app_rw\" is not permitted to log in (SQLSTATE 28000)",
			"database: failed to connect to the database (the server refused it: SQLSTATE 28000, authorization refused: no such role, a role that may not log in, or pg_hba.conf)",
		},
		{
			"database: failed to connect to `user=app_rw database=orders_prod`:\n\t10.0.0.9:5432 (db-a.internal): dial error: dial tcp 10.0.0.9:5432: connect: connection refused\n\t10.0.0.10:5432 (db-b.internal): dial error: dial tcp 10.0.0.10:5432: connect: connection refused",
			"database: failed to connect to the database (connection refused)",
		},
		{
			"database: failed to connect to `user=app_rw database=orders_prod`: hostname resolving error: lookup db.internal on 10.96.0.10:53: no such host",
			"database: failed to connect to the database (the host name does not resolve)",
		},
		{
			"database: failed to connect to `user=app_rw database=orders_prod`: 10.0.0.9:5432 (db.internal): tls error: tls: failed to verify certificate: x509: certificate is valid for db-a.internal, not db.internal",
			"database: failed to connect to the database (the TLS handshake failed)",
		},
		{
			"database: failed to connect to `user=app_rw database=orders_prod`: 10.0.0.9:5432 (db.internal): dial error: timeout: context deadline exceeded",
			"database: failed to connect to the database (timed out)",
		},
		{
			"2 of 3 outboxes cannot work: tenant acme schema orders: database: failed to connect to the database: 10.0.0.9:5432 (db.internal): server error: FATAL: password authentication failed for user \"app_rw\" (SQLSTATE 28P01); " +
				"schema billing: claims have failed for 12s: claim batch: ERROR: permission denied for schema orders_prod (SQLSTATE 42501); " +
				"schema shipping: claims have failed for 11s: claim batch: read tcp 10.0.0.5:41234->10.0.0.9:5432: read: connection reset by peer",
			"2 of 3 outboxes cannot work: tenant acme schema orders: database: failed to connect to the database (the server refused it: SQLSTATE 28P01, authentication failed); " +
				"schema billing: claims have failed for 12s: claim batch: PostgreSQL SQLSTATE 42501, permission denied; " +
				"schema shipping: claims have failed for 11s: claim batch: read tcp: read: connection reset by peer",
		},
		{
			"schema orders: failed, tried again in 2s: check the schema version: ERROR: relation \"orders_prod.schema_version\" does not exist (SQLSTATE 42P01)",
			"schema orders: failed, tried again in 2s: check the schema version: PostgreSQL SQLSTATE 42P01",
		},
		{"starting: waiting for the database", "starting: waiting for the database"},
		{"sink nats: unavailable for 3s: nats: no servers available for connection", "sink nats: unavailable for 3s: nats: no servers available for connection"},
	} {
		got := readinessText(errors.New(c.in))
		if got != c.want {
			t.Errorf("readinessText(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		for _, s := range secret {
			if strings.Contains(got, s) {
				t.Errorf("readinessText(%q) = %q shows %q", c.in, got, s)
			}
		}
	}
}
