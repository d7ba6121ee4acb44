package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
)

func cmdHelp(_ context.Context, inv *Invocation, _ []string) error {
	printUsage(inv.Stdout)
	fmt.Fprintln(inv.Stdout)
	printEnvReference(inv.Stdout)
	return nil
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
	fmt.Fprintln(w, "Configuration is read from the environment only; `outbox-relay help` lists every variable.")
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
			Doc:     f.field.Tag.Get("doc"),
			Allowed: f.field.Tag.Get("allowed"),
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
