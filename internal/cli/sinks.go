package cli

import (
	"log/slog"
	"slices"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// sinkEnv is one sink's part of the configuration: a struct of environment
// variables, embedded in config, with its validation and the opening of the
// sink. Each lives in its own file (sink_<name>.go). Adding a sink is its
// package under sinks/, that file, a field in config and a line in
// sinkEnvs.
type sinkEnv interface {
	// name is the sink's name: a row's destination and RELAY_SINK use it.
	name() string
	// enabledBy names the variable that turns the sink on.
	enabledBy() string
	// enabled reports whether that variable is set.
	enabled() bool
	// validate checks the sink's variables (enabled or not: a stray value
	// is still a mistake), with c holding the rest of the configuration.
	validate(c *config) error
	// settings returns the sink package's Config made from c, without a
	// logger: what the sink will run with.
	settings(c *config, version string) any
	// open makes the sink from what settings returned.
	open(settings any, log *slog.Logger) (sinks.Sink, error)
}

// sinkEnvs lists the sinks, in the order of the reference.
func (c *config) sinkEnvs() []sinkEnv {
	return []sinkEnv{&c.NATS, &c.Webhook, &c.Kafka, &c.RabbitMQ}
}

// knownSinks lists the name of every sink the binary has.
func knownSinks() []string {
	var c config
	var names []string
	for _, s := range c.sinkEnvs() {
		names = append(names, s.name())
	}
	return names
}

// sinkNames lists the configured (enabled) sinks.
func (c *config) sinkNames() []string {
	var names []string
	for _, s := range c.sinkEnvs() {
		if s.enabled() {
			names = append(names, s.name())
		}
	}
	return names
}

// defaultSink is the sink of rows without a destination: RELAY_SINK, or the
// only configured sink, or "".
func (c *config) defaultSink() string {
	if c.Sink != "" {
		return c.Sink
	}
	if names := c.sinkNames(); len(names) == 1 {
		return names[0]
	}
	return ""
}

// hasSink reports whether name is a configured sink.
func (c *config) hasSink(name string) bool {
	return slices.Contains(c.sinkNames(), name)
}
