package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// openPool returns a pool of at most maxConns connections to databaseURL,
// with tracer, when not nil, as its connections' tracer (the fleet's bound
// on each outbox's share of a shared pool). Connections name themselves
// outbox-relay in pg_stat_activity unless the URL names them otherwise,
// and turn PostgreSQL's JIT off (jitOff): every statement of the relay
// reads a few rows by index, and on a hot table whose statistics lag its
// size the planner's estimates pass jit_above_cost, and each execution
// compiled for up to seconds. It is a
// SET after connecting, not a startup parameter, which a PgBouncer
// refuses; behind a transaction-pooling PgBouncer it reaches only the
// server connection it ran on, so the statements the relay runs in
// transactions of their own (claims behind a backlog and every claim of
// ordered mode's heads, ordered mode's settles, the claim floor's
// refreshes) turn it off in them as well (relay: jitOff); its other
// statements there run with the server's setting (ALTER ROLE … SET jit =
// off covers them). A server or proxy that refuses the SET leaves JIT as
// it is: the connection is not refused for it.
func openPool(ctx context.Context, databaseURL string, maxConns int32, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	if err := checkDatabaseScheme(databaseURL); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, databaseURLError(databaseURL, err)
	}
	pc.MaxConns = maxConns
	if tracer != nil {
		pc.ConnConfig.Tracer = tracer
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "outbox-relay"
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, _ = c.Exec(ctx, jitOff)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// jitOff is what openPool runs on each new connection.
const jitOff = "SET jit = off"

// plaintextDatabase reports whether databaseURL lets the connection to a
// host that is neither a loopback address nor a unix socket go without TLS
// (sslmode disable, allow, or prefer: pgx's default when sslmode is unset,
// which falls back to plain text when the server declines TLS), with that
// host and the sslmode in effect. A password then reaches whatever answers
// at the address in clear. It reads the connection string as pgx does
// (PGSSLMODE and the other PG* variables included) and reports nothing for
// one pgx cannot parse.
func plaintextDatabase(databaseURL string) (host, sslmode string, ok bool) {
	pc, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return "", "", false
	}
	// Each host is tried with the primary configuration's TLS settings,
	// then with those of its fallbacks: with TLS then without (prefer),
	// without then with (allow), or without only (disable).
	type attempt struct {
		host string
		tls  bool
	}
	attempts := []attempt{{pc.Host, pc.TLSConfig != nil}}
	for _, fb := range pc.Fallbacks {
		attempts = append(attempts, attempt{fb.Host, fb.TLSConfig != nil})
	}
	for i, a := range attempts {
		if a.tls || localDatabaseHost(a.host) {
			continue
		}
		first, withTLS := a, false
		for _, b := range attempts {
			if b.host == a.host {
				withTLS = withTLS || b.tls
			}
		}
		for _, b := range attempts[:i] {
			if b.host == a.host {
				first = b
				break
			}
		}
		switch {
		case !withTLS:
			return a.host, "disable", true
		case first.tls:
			return a.host, "prefer", true
		default:
			return a.host, "allow", true
		}
	}
	return "", "", false
}

// localDatabaseHost reports whether host is a unix socket's directory or a
// loopback name or address, where the connection does not cross a network.
func localDatabaseHost(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// warnPlaintextDatabase logs one warning when DATABASE_URL lets the
// connection to a remote database go without TLS (plaintextDatabase).
func warnPlaintextDatabase(log *slog.Logger, databaseURL string) {
	host, mode, ok := plaintextDatabase(databaseURL)
	if !ok {
		return
	}
	if mode == "prefer" {
		mode = "prefer (pgx's default when sslmode is not set)"
	}
	log.Warn("DATABASE_URL allows a connection without TLS to a remote database: the password, queries and payloads "+
		"may travel in clear, to an impostor too; set sslmode=verify-full (with sslrootcert for a private CA), or at least sslmode=require",
		"variable", "DATABASE_URL", "host", host, "sslmode", mode)
}

// waitForDatabase pings until the database answers or ctx ends, so that a
// relay started beside its database waits for it instead of crashing. The
// first failure is logged at error level with the reason and the next try,
// then a reminder at a growing interval, and the recovery at info.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	wait := 250 * time.Millisecond
	var began, remindAt time.Time
	remindEvery := 30 * time.Second
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pool.Ping(pingCtx)
		cancel()
		if err == nil {
			if !began.IsZero() {
				log.Info("database reachable", "unreachable_for", time.Since(began).Round(time.Second))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("connect to database: %w", err)
		}
		now := time.Now()
		switch {
		case began.IsZero():
			began, remindAt = now, now.Add(remindEvery)
			log.Error("cannot reach the database: nothing is delivered until it answers; retrying", "err", err, "retry_in", wait)
		case now.After(remindAt):
			remindEvery = min(2*remindEvery, 10*time.Minute)
			remindAt = now.Add(remindEvery)
			log.Error("still cannot reach the database; retrying", "for", now.Sub(began).Round(time.Second), "err", err, "retry_in", wait)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("connect to database: %w", err)
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// applyMigrations brings schema to the latest version.
func applyMigrations(ctx context.Context, pool *pgxpool.Pool, schema string, payloadLimit int64) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Release()
	n, err := migrations.Apply(ctx, conn.Conn(), schema)
	if err != nil {
		return n, err
	}
	if _, err := migrations.SetPayloadLimit(ctx, conn.Conn(), schema, payloadLimit); err != nil {
		return n, fmt.Errorf("RELAY_MAX_PAYLOAD_BYTES: %w", err)
	}
	return n, nil
}

// checkSchema refuses a schema that is not at the version this binary
// needs: for a relay with RELAY_MIGRATE=false and for the admin commands.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Release()
	if err := migrations.Check(ctx, conn.Conn(), schema); err != nil {
		if permissionDenied(err) {
			return fmt.Errorf("%w: this database user lacks privileges on schema %s; its owner grants them with migrations/least_privilege.sql (docs/security.md, Least privilege)", err, schema)
		}
		return err
	}
	return nil
}

// permissionDenied reports whether err is PostgreSQL's
// insufficient_privilege: the database user may not do what was asked.
func permissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}
