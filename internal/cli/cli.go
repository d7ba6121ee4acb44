// Package cli is the outbox-relay binary: its commands, its configuration
// from the environment, its logging and its HTTP endpoint. main.go only
// hands it the process's arguments, environment and signals.
//
// Each command lives in its own file (run.go, migrate.go, status.go, …) and
// is listed once in commands, which both dispatches and prints the help.
// Each sink has its own file too (sink_nats.go, sink_webhook.go): its
// sinkKind, its environment variables, their validation, the sink
// package's Config they make and the sink's opening; sinkKinds (sinks.go)
// lists them, and every list of sinks is made from it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad arguments or configuration: nothing was started
)

// Invocation is one run of the binary.
type Invocation struct {
	// Version is the binary's version (stamped by .ci/build).
	Version string
	// Args are the arguments after the program name.
	Args []string
	// Environ holds KEY=value pairs: the only source of configuration.
	Environ []string
	// Stdout receives a command's output; Stderr its logs and errors.
	Stdout, Stderr io.Writer
}

// command is one subcommand: its name, a line for the help, and what it
// does with the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, inv *Invocation, args []string) error
}

// commands dispatches and documents the subcommands, in the order help
// lists them.
var commands []command

func init() {
	// Assigned here rather than at declaration because help refers to
	// commands.
	commands = []command{
		{"run", "run the relay until SIGTERM (the default)", cmdRun},
		{"migrate", "apply the migrations; --print prints their SQL instead", cmdMigrate},
		{"status", "show the backlog, rows in flight, dead letters and table sizes", cmdStatus},
		{"dead", "list, retry or purge dead letters: dead list|retry|purge", cmdDead},
		{"replay", "send delivered (archived) rows again", cmdReplay},
		{"cancel", "move pending rows of a key or topic to the dead letters", cmdCancel},
		{"console", "serve the web console: outboxes, dead letters by cause, a key's history, the horizon", cmdConsole},
		{"healthcheck", "probe /readyz (for Docker's HEALTHCHECK); exit 0 when ready", cmdHealthcheck},
		{"bench", "measure drain rate or latency on a scratch schema", cmdBench},
		{"version", "print the version", cmdVersion},
		{"help", "print this help and the configuration reference", cmdHelp},
	}
}

// Main runs the command inv names and returns the process exit code.
func Main(ctx context.Context, inv Invocation) int {
	name, args := "run", inv.Args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		name, args = "help", args[1:]
	}
	stdout, stderr := &commandWriter{w: inv.Stdout}, &commandWriter{w: inv.Stderr}
	defer stdout.end()
	defer stderr.end()
	inv.Stdout, inv.Stderr = stdout, stderr
	c, ok := lookup(name)
	if !ok {
		if closest := suggestCommand(name); closest != "" {
			fmt.Fprintf(inv.Stderr, "outbox-relay: unknown command %q; did you mean %q?\n\n", name, closest)
		} else {
			fmt.Fprintf(inv.Stderr, "outbox-relay: unknown command %q\n\n", name)
		}
		printUsage(inv.Stderr)
		return exitUsage
	}
	err := c.run(ctx, &inv, args)
	var cfgErr *configError
	var uErr usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return exitOK
	case errors.As(err, &cfgErr), errors.As(err, &uErr):
		fmt.Fprintf(inv.Stderr, "outbox-relay %s: %v\n", name, err)
		return exitUsage
	default:
		fmt.Fprintf(inv.Stderr, "outbox-relay %s: %v\n", name, err)
		return exitFailure
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errHelpShown ends a command whose --help was printed.
var errHelpShown = errors.New("help shown")
