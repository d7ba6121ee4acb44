package cli

import (
	"log/slog"

	"github.com/outbox-relay/outbox-relay/relay"
)

// settings is the configuration as the binary applies it. settingsOf is
// the one place where environment variables become the engine's, the
// sinks' and the process's settings; a test sets every variable of the
// reference in turn and checks that it changes something here.
type settings struct {
	// DatabaseURL, Migrate and HTTPAddr are the process's.
	DatabaseURL string
	Migrate     bool
	HTTPAddr    string
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

// settingsOf maps a validated configuration to the settings the binary runs
// with.
func settingsOf(c *config, version string) settings {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated by loadConfig
	s := settings{
		DatabaseURL: c.DatabaseURL,
		Migrate:     c.Migrate,
		HTTPAddr:    c.HTTPAddr,
		LogLevel:    level,
		LogFormat:   c.LogFormat,
		Relay: relay.Config{
			Schema:            c.Schema,
			ID:                c.ID,
			Version:           version,
			DefaultSink:       c.defaultSink(),
			BatchSize:         c.BatchSize,
			MaxInFlight:       c.MaxInFlight,
			MaxInFlightBytes:  c.MaxInFlightBytes,
			PollInterval:      c.PollInterval,
			Lease:             c.Lease,
			Mode:              c.mode(),
			Notify:            c.Notify,
			MaxAttempts:       c.MaxAttempts,
			BackoffMin:        c.BackoffMin,
			BackoffMax:        c.BackoffMax,
			DrainTimeout:      c.DrainTimeout,
			ArchiveRetention:  forever(c.ArchiveRetention),
			DedupRetention:    forever(c.DedupRetention),
			CloudEventsSource: c.CloudEvents,
			TraceInject:       c.Tracing.Inject,
		},
		Tracing: c.Tracing.settings(version),
		Sinks:   map[string]any{},
	}
	for _, e := range c.sinkEnvs() {
		if e.enabled() {
			s.Sinks[e.name()] = e.settings(c, version)
		}
	}
	return s
}
