package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

func cmdHelp(ctx context.Context, inv *Invocation, args []string) error {
	// help <command> is <command> -h.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "help" {
		c, ok := lookup(args[0])
		if !ok {
			printUsage(inv.Stderr)
			return usageError{fmt.Errorf("unknown command %q", args[0])}
		}
		toStdout := *inv
		toStdout.Stderr = inv.Stdout
		return c.run(ctx, &toStdout, append(slices.Clone(args[1:]), "-h"))
	}
	printUsage(inv.Stdout)
	fmt.Fprintln(inv.Stdout)
	printCommandFlags(inv.Stdout)
	fmt.Fprintln(inv.Stdout)
	printEnvReference(inv.Stdout)
	return nil
}

// helpInvocations lists the command lines that take flags of their own, in
// the order of commands: each command, and each of dead's.
func helpInvocations() [][]string {
	var out [][]string
	for _, c := range commands {
		switch c.name {
		case "help":
		case "dead":
			out = append(out, []string{"dead", "list"}, []string{"dead", "retry"}, []string{"dead", "purge"})
		default:
			out = append(out, []string{c.name})
		}
	}
	return out
}

// commandFlags returns the flags (--name) that `outbox-relay <args> -h`
// lists, by running it: the help lists what each command really takes.
func commandFlags(args []string) []string {
	c, ok := lookup(args[0])
	if !ok {
		panic("no command " + args[0])
	}
	var usage strings.Builder
	_ = c.run(context.Background(), &Invocation{Stdout: io.Discard, Stderr: &usage}, append(slices.Clone(args[1:]), "-h"))
	var flags []string
	for line := range strings.Lines(usage.String()) {
		if strings.HasPrefix(line, "  --") {
			flags = append(flags, strings.Fields(line)[0])
		}
	}
	return flags
}

// printCommandFlags lists each command line's flags.
func printCommandFlags(w io.Writer) {
	fmt.Fprintln(w, "Flags (`outbox-relay <command> -h` or `outbox-relay help <command>` explains them):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, inv := range helpInvocations() {
		flags := strings.Join(commandFlags(inv), " ")
		if flags == "" {
			flags = "(none)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(inv, " "), flags)
	}
	tw.Flush()
}

// printUsage lists the commands.
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
	fmt.Fprintln(w, "`outbox-relay <command> -h` lists a command's flags; `outbox-relay help` lists every command's flags")
	fmt.Fprintln(w, "and every environment variable: configuration is read from the environment only.")
}

// envVar documents one environment variable.
type envVar struct{ Name, Default, Doc, Allowed string }

// envReference returns one entry per environment variable, in the order of
// the config struct.
func envReference() []envVar {
	var vars []envVar
	for _, f := range configFields() {
		vars = append(vars, envVar{
			Name:    f.name,
			Default: f.field.Tag.Get("envDefault"),
			Doc:     f.doc(),
			Allowed: f.allowed(),
		})
		if f.field.Tag.Get("redact") != "" {
			vars = append(vars, envVar{
				Name:    f.name + fileSuffix,
				Doc:     "A file holding " + f.name + ", read at start, for secrets mounted as files (Docker, Kubernetes). Setting both is an error.",
				Allowed: "the path of a readable regular file (or a link to one, as Kubernetes mounts secrets) of at most " + formatLimit(secretFileLimit) + "; a final line break is ignored",
			})
		}
	}
	return vars
}

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
