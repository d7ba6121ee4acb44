package cli

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// sinkKinds are the sinks the binary has, in the order of the reference.
// Every list of sinks in the command line, its messages and its reference
// is made from this one: adding a sink is its package under sinks/, its
// file sink_<name>.go, which declares its sinkKind, and its line here
// (docs/development.md, Adding a sink; TestSinkKinds_HaveWhatAddingASinkLists
// checks the rest of that list).
var sinkKinds = []sinkKind{
	natsKind,
	webhookKind,
	kafkaKind,
	rabbitmqKind,
	pubsubKind,
	redisKind,
	sqsKind,
	snsKind,
}

// sinkKind is one sink the binary has, as its file declares it.
type sinkKind struct {
	// name is the sink's name: a row's destination and RELAY_SINK use it,
	// and its package is sinks/<name>.
	name string
	// prefix begins each of its variables (NATS_): a variable with it
	// that the relay does not read is reported as a likely typo.
	prefix string
	// enabledBy names the variable that turns the sink on when it is set
	// (not empty): a string field of its variables.
	enabledBy string
	// timeout names the variable (a duration) that bounds one delivery,
	// which RELAY_LEASE must cover: the lease is at least 5/3 of it.
	timeout string
	// problems are the codes its start-up check (sinks.StartupChecker)
	// reports in outbox_relay_sink_problem, in the order the docs give
	// them; none when it has no check.
	problems []string
	// env returns a new, zero struct of its variables (a pointer), parsed
	// from the environment as config is.
	env func() sinkEnv
}

// sinkEnv is one sink's part of the configuration: a struct of environment
// variables (env, envDefault, doc, allowed and redact tags as in config)
// with its validation and the opening of the sink. Each lives in its own
// file (sink_<name>.go), with its sinkKind.
type sinkEnv interface {
	// validate checks the sink's variables (enabled or not: a stray value
	// is still a mistake), with c holding the rest of the configuration.
	// That RELAY_LEASE covers deliveryTimeout is checked after it, for
	// every sink.
	validate(c *config) error
	// deliveryTimeout is how long one delivery may wait for the
	// destination: the value of the kind's timeout variable, or 0 when
	// the sink, as configured, waits for nothing (core NATS).
	deliveryTimeout() time.Duration
	// settings returns the sink package's Config made from c, without a
	// logger: what the sink will run with.
	settings(c *config, version string) any
	// open makes the sink from what settings returned.
	open(settings any, log *slog.Logger) (sinks.Sink, error)
}

// newSinkEnvs returns a zero struct of variables for each of sinkKinds, in
// its order: config.sinks.
func newSinkEnvs() []sinkEnv {
	envs := make([]sinkEnv, len(sinkKinds))
	for i, k := range sinkKinds {
		envs[i] = k.env()
	}
	return envs
}

// sinkEnvOf returns c's variables of the sink whose struct is E; it
// panics when no sink has that struct, which is a programming error.
func sinkEnvOf[E any](c *config) *E {
	for _, e := range c.sinks {
		if p, ok := any(e).(*E); ok {
			return p
		}
	}
	panic(fmt.Sprintf("no sink has the variables %T", (*E)(nil)))
}

// sinkEnabled reports whether the sink sinkKinds[i] is configured: its
// enabling variable is set.
func (c *config) sinkEnabled(i int) bool {
	return configField(sinkKinds[i].enabledBy).value(c).String() != ""
}

// validateSinks checks every sink's variables, in the order of the
// reference, and that RELAY_LEASE covers the delivery timeout of each
// configured sink.
func (c *config) validateSinks() error {
	for i, k := range sinkKinds {
		e := c.sinks[i]
		if err := e.validate(c); err != nil {
			return err
		}
		if d := e.deliveryTimeout(); c.sinkEnabled(i) && d > 0 && !leaseCovers(c.Lease, d) {
			return c.refuse("RELAY_LEASE", fmt.Sprintf("must be at least 5/3 of %s=%s, so that a delivery fits in the lease with room to spare", k.timeout, d))
		}
	}
	return nil
}

// knownSinks lists the name of every sink the binary has.
func knownSinks() []string {
	var names []string
	for _, k := range sinkKinds {
		names = append(names, k.name)
	}
	return names
}

// sinkEnablers lists the variable that enables each sink.
func sinkEnablers() []string {
	var out []string
	for _, k := range sinkKinds {
		out = append(out, k.enabledBy)
	}
	return out
}

// sinkTimeouts lists the variable that bounds each sink's deliveries: the
// timeouts RELAY_LEASE must cover.
func sinkTimeouts() []string {
	var out []string
	for _, k := range sinkKinds {
		out = append(out, k.timeout)
	}
	return out
}

// sinkProblems lists each sink's start-up problems as "nats: no_stream,
// short_dedup_window; kafka: …", every code passed through code (which
// may quote it); sinks without a start-up check are left out.
func sinkProblems(code func(string) string) string {
	var parts []string
	for _, k := range sinkKinds {
		if len(k.problems) == 0 {
			continue
		}
		var codes []string
		for _, p := range k.problems {
			codes = append(codes, code(p))
		}
		parts = append(parts, k.name+": "+strings.Join(codes, ", "))
	}
	return strings.Join(parts, "; ")
}

// sinkNames lists the configured (enabled) sinks.
func (c *config) sinkNames() []string {
	var names []string
	for i, k := range sinkKinds {
		if c.sinkEnabled(i) {
			names = append(names, k.name)
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
