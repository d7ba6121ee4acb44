package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
)

// commands lists the subcommands for the usage text.
var commands = []struct{ name, summary string }{
	{"run", "run the relay until SIGTERM (the default)"},
	{"migrate", "apply the migrations; --print prints their SQL instead"},
	{"status", "show the backlog, rows in flight, dead letters and table sizes"},
	{"dead", "list, retry or purge dead letters: dead list|retry|purge"},
	{"replay", "send delivered (archived) rows again"},
	{"cancel", "move pending rows of a key or topic to the dead letters"},
	{"healthcheck", "probe /readyz (for Docker's HEALTHCHECK); exit 0 when ready"},
	{"bench", "measure drain rate or latency against a scratch schema"},
	{"version", "print the version"},
	{"help", "print this help"},
}

func cmdHelp(_ context.Context, _, _ []string, stdout, _ io.Writer) error {
	printUsage(stdout)
	fmt.Fprintln(stdout)
	printEnvReference(stdout)
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: outbox-relay [command] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configuration is read from the environment only; `outbox-relay help` lists every variable.")
}

// envReference returns one entry per environment variable, in the order of
// the config struct.
func envReference() []envVar {
	var vars []envVar
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		f := t.Field(i)
		vars = append(vars, envVar{
			Name:    f.Tag.Get("env"),
			Default: f.Tag.Get("envDefault"),
			Doc:     f.Tag.Get("doc"),
			Allowed: f.Tag.Get("allowed"),
		})
	}
	return vars
}

// envVar documents one environment variable.
type envVar struct{ Name, Default, Doc, Allowed string }

func printEnvReference(w io.Writer) {
	fmt.Fprintln(w, "Environment:")
	for _, v := range envReference() {
		def := v.Default
		if def == "" {
			def = "unset"
		}
		fmt.Fprintf(w, "  %s (default: %s)\n      %s\n      Allowed: %s.\n", v.Name, def, v.Doc, v.Allowed)
	}
}

// flagSet is a subcommand's flags and the usage text -h prints.
type flagSet struct {
	*flag.FlagSet
	usage func()
}

// newFlagSet returns the flag set of one subcommand. The flag package prints
// nothing itself: parseFlags prints usage for -h, and run prints mistakes.
func newFlagSet(usage, summary string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(strings.Fields(usage)[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: func() {
		fmt.Fprintf(stderr, "Usage: outbox-relay %s\n\n%s\n", usage, summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}}
}

// parseFlags parses args, printing usage for -h (errHelpShown) and turning
// other mistakes into usage errors.
func parseFlags(fs *flagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.usage()
			return errHelpShown
		}
		return usageError{fmt.Errorf("%w (outbox-relay %s -h lists the flags)", err, fs.Name())}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (outbox-relay %s -h lists the flags)", fs.Arg(0), fs.Name())}
	}
	return nil
}
