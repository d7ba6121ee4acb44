package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// flagSet is a subcommand's flags and the usage text -h prints.
type flagSet struct {
	*flag.FlagSet
	usage func()
}

// newFlagSet returns the flag set of one subcommand. The flag package prints
// nothing itself: parseFlags prints usage for -h, and Main prints mistakes.
func newFlagSet(usage, summary string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(commandName(usage), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: func() {
		fmt.Fprintf(stderr, "Usage: outbox-relay %s\n\n%s\n", usage, summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nFlags:")
			printFlags(stderr, fs)
		}
	}}
}

// commandName returns the command words that begin a usage line ("dead
// list" of "dead list [filters] …"): how errors refer to the command.
func commandName(usage string) string {
	var words []string
	for _, w := range strings.Fields(usage) {
		if strings.ContainsAny(w[:1], "[(<-") {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// printFlags lists fs's flags as the docs write them, with two dashes
// (the flag package accepts one or two).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// parseFlags parses args, printing usage for -h (errHelpShown) and turning
// other mistakes into usage errors.
func parseFlags(fs *flagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.usage()
			return errHelpShown
		}
		// The flag package writes flags with one dash; the help and the
		// docs write them with two.
		msg := strings.NewReplacer("for flag -", "for flag --", "defined: -", "defined: --", "argument: -", "argument: --").Replace(err.Error())
		return usageError{fmt.Errorf("%s (outbox-relay %s -h lists the flags)", msg, fs.Name())}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (outbox-relay %s -h lists the flags)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// limitFlag is a flag.Value for a count limit: an integer of 0 (no limit)
// or more. A negative one is refused: it would show or touch everything.
type limitFlag int

func (n *limitFlag) String() string {
	if n == nil {
		return "0"
	}
	return strconv.Itoa(int(*n))
}

func (n *limitFlag) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	if v < 0 {
		return errors.New("negative: want 0 or more")
	}
	*n = limitFlag(v)
	return nil
}

// timeFlag is a flag.Value for a point in time: RFC 3339, or a duration
// meaning that long ago.
type timeFlag time.Time

func (t *timeFlag) String() string {
	if t == nil || time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).Format(time.RFC3339)
}

func (t *timeFlag) Set(s string) error {
	if v, err := time.Parse(time.RFC3339Nano, s); err == nil {
		*t = timeFlag(v)
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		*t = timeFlag(time.Now().Add(-d))
		return nil
	}
	return errors.New("want an RFC 3339 time like 2026-01-02T15:04:05Z or a duration ago like 24h")
}

// idsFlag is a flag.Value collecting ids from repeated flags and commas.
type idsFlag []int64

func (ids *idsFlag) String() string {
	if ids == nil {
		return ""
	}
	return joinIDs(*ids, len(*ids))
}

func (ids *idsFlag) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an id", part)
		}
		*ids = append(*ids, id)
	}
	return nil
}
