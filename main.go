// Command outbox-relay delivers rows of a PostgreSQL outbox table to their
// destinations (NATS, Kafka, RabbitMQ, HTTP webhooks), at least once, and archives them. It is
// configured by environment variables only; `outbox-relay help` prints the
// reference. The commands live in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outbox-relay/outbox-relay/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…" (.ci/build).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		// After the first signal, a second one kills the process.
		<-ctx.Done()
		stop()
	}()
	os.Exit(cli.Main(ctx, cli.Invocation{
		Version: version,
		Args:    os.Args[1:],
		Environ: os.Environ(),
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	}))
}
