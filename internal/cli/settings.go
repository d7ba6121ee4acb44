package cli

import (
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/fleet"
	"github.com/outbox-relay/outbox-relay/relay"
)

// settings is the configuration as the binary applies it. settingsOf is
// the one place where environment variables become the engine's, the
// sinks' and the process's settings; a test sets every variable of the
// reference in turn and checks that it changes something here.
type settings struct {
	// DatabaseURL, Migrate, HTTPAddr and HTTPMaxConnections are the
	// process's.
	DatabaseURL        string
	Migrate            bool
	HTTPAddr           string
	HTTPMaxConnections int
	// Console and ConsoleSecret are the web console's on the endpoint
	// (RELAY_CONSOLE, RELAY_CONSOLE_SECRET).
	Console       bool
	ConsoleSecret string
	// Outboxes are the databases and schemas the relay serves, and how
	// (many-outbox settings, package fleet).
	Outboxes outboxSettings
	// LogLevel and LogFormat make the logger (newLogger).
	LogLevel  slog.Level
	LogFormat string
	// Relay is the engine's configuration, but for Sinks, Logger and
	// Metrics, which run sets from what it opens.
	Relay relay.Config
	// Tracing makes the tracer provider (newTracerProvider).
	Tracing tracing
	// Sinks holds each configured sink's Config (its package's type), by
	// sink name; run opens them.
	Sinks map[string]any
}

// outboxSettings are the fleet's settings but its relay configuration.
type outboxSettings struct {
	Databases     []fleet.Database
	Labelled      bool
	DiscoverEvery time.Duration
	ReadyWhenAny  bool
}

// outboxSettingsOf reads which outboxes the configuration serves (the
// tenants file's ${VAR}s from environ).
func outboxSettingsOf(c *config, environ []string) (outboxSettings, error) {
	dbs, err := c.databases(environ)
	if err != nil {
		return outboxSettings{}, err
	}
	return outboxSettings{Databases: dbs, Labelled: c.several(), DiscoverEvery: c.DiscoverInterval, ReadyWhenAny: c.ReadyWhen == "any"}, nil
}

// settingsOf maps a validated configuration to the settings the binary runs
// with, but for the outboxes it serves (outboxSettingsOf).
func settingsOf(c *config, version string) settings {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated by loadConfig
	s := settings{
		DatabaseURL:        c.DatabaseURL,
		Migrate:            c.Migrate,
		HTTPAddr:           c.HTTPAddr,
		HTTPMaxConnections: c.HTTPMaxConnections,
		Console:            c.Console,
		ConsoleSecret:      c.ConsoleSecret,
		LogLevel:           level,
		LogFormat:          c.LogFormat,
		Relay: relay.Config{
			Schema:            c.Schema,
			ID:                c.ID,
			Version:           version,
			DefaultSink:       c.defaultSink(),
			BatchSize:         c.BatchSize,
			MaxInFlight:       c.MaxInFlight,
			MaxInFlightBytes:  c.MaxInFlightBytes,
			MaxPayloadBytes:   c.MaxPayloadBytes,
			PollInterval:      c.PollInterval,
			IdlePollInterval:  c.idlePollInterval(),
			Lease:             c.Lease,
			Mode:              c.mode(),
			Notify:            c.Notify,
			MaxAttempts:       c.MaxAttempts,
			BackoffMin:        c.BackoffMin,
			BackoffMax:        c.BackoffMax,
			DrainTimeout:      c.DrainTimeout,
			ArchiveRetention:  forever(c.ArchiveRetention),
			DedupRetention:    forever(c.DedupRetention),
			HotRotation:       forever(c.HotRotation),
			CloudEventsSource: c.CloudEvents,
			TraceInject:       c.Tracing.Inject,
		},
		Tracing: c.Tracing.settings(version),
		Sinks:   map[string]any{},
	}
	for i, k := range sinkKinds {
		if c.sinkEnabled(i) {
			s.Sinks[k.name] = c.sinks[i].settings(c, version)
		}
	}
	return s
}
