// Command outbox-relay delivers rows of a PostgreSQL outbox table to NATS
// and HTTP webhooks, at least once, and archives them. It is configured by
// environment variables only; run `outbox-relay help` for the reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lmittmann/tint"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad arguments or configuration: nothing was started
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		// After the first signal, a second one kills the process.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// usageError is a mistake in the command line or configuration.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes one command and returns the process exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		cmd, args = "help", args[1:]
	}
	c, err := command(cmd)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-relay: %v\n\n", err)
		printUsage(stderr)
		return exitUsage
	}
	if err := c(ctx, args, environ, stdout, stderr); err != nil {
		var cfgErr *configError
		var uErr usageError
		switch {
		case errors.Is(err, errHelpShown):
			return exitOK
		case errors.As(err, &cfgErr), errors.As(err, &uErr):
			fmt.Fprintf(stderr, "outbox-relay %s: %v\n", cmd, err)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "outbox-relay %s: %v\n", cmd, err)
			return exitFailure
		}
	}
	return exitOK
}

// commandFunc runs one subcommand.
type commandFunc func(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error

func command(name string) (commandFunc, error) {
	switch name {
	case "run":
		return cmdRun, nil
	case "migrate":
		return cmdMigrate, nil
	case "version":
		return cmdVersion, nil
	case "bench":
		return cmdBench, nil
	case "healthcheck":
		return cmdHealthcheck, nil
	case "status":
		return cmdStatus, nil
	case "dead":
		return cmdDead, nil
	case "replay":
		return cmdReplay, nil
	case "cancel":
		return cmdCancel, nil
	case "help":
		return cmdHelp, nil
	}
	return nil, fmt.Errorf("unknown command %q", name)
}

// errHelpShown ends a command whose --help was printed.
var errHelpShown = errors.New("help shown")

func cmdVersion(_ context.Context, args, _ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "Print the version.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "outbox-relay %s (schema version %d)\n", version, migrations.Latest())
	return nil
}

func cmdMigrate(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate [--print]", "Apply the relay's migrations to RELAY_SCHEMA (advisory-locked; safe with several replicas), or print them.", stderr)
	printSQL := fs.Bool("print", false, "print the SQL for RELAY_SCHEMA instead of applying it (no database needed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(environ)
	if err != nil {
		return err
	}
	if *printSQL {
		sql, err := migrations.Render(c.Schema)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, sql)
		return err
	}
	if err := c.requireDatabase(); err != nil {
		return err
	}
	log := newLogger(c, stderr)
	pool, err := openPool(ctx, c, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := applyMigrations(ctx, pool, c.Schema)
	if err != nil {
		return err
	}
	log.Info("migrations applied", "schema", c.Schema, "num_applied", n, "version", migrations.Latest())
	return nil
}

// applyMigrations brings schema to the latest version.
func applyMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Release()
	return migrations.Apply(ctx, conn.Conn(), schema)
}

// checkSchema refuses a schema that is not at the version this binary
// needs: for a relay with RELAY_MIGRATE=false and for the admin commands.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Release()
	return migrations.Check(ctx, conn.Conn(), schema)
}

// openPool returns a pool for the configured database. Connections name
// themselves outbox-relay in pg_stat_activity.
func openPool(ctx context.Context, c config, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, databaseURLError(c.DatabaseURL, err)
	}
	pc.MaxConns = maxConns
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "outbox-relay"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// waitForDatabase pings until the database answers or ctx ends, so that a
// relay started beside its database waits for it instead of crashing.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	wait := 250 * time.Millisecond
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pool.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("connect to database: %w", err)
		}
		log.Warn("database unreachable; retrying", "err", err, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("connect to database: %w", err)
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// newLogger returns the configured logger: tint on a terminal, JSON
// otherwise (LOG_FORMAT=auto), at LOG_LEVEL.
func newLogger(c config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated by loadConfig
	format := c.LogFormat
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}))
}

// readableDurations writes durations as "1h0m30s" rather than nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
