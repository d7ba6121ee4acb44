// Command subscribe prints the messages published on a NATS subject, with
// their headers: the quick start's way to see the relay's deliveries arrive.
//
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/subscribe             # events.>
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/subscribe -subject 'events.orders.>'
//
// It subscribes with core NATS, so it sees messages published while it runs;
// the JetStream stream keeps them for consumers that start later.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

func main() {
	subject := flag.String("subject", "events.>", "subject to subscribe to")
	count := flag.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	flag.Parse()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	if err := subscribe(url, *subject, *count, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// subscribe prints the messages on subject to w until count of them arrived
// (0: until interrupted).
func subscribe(url, subject string, count int, w io.Writer) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "waiting for messages on %s\n", subject)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	for n := 0; count == 0 || n < count; n++ {
		select {
		case m := <-msgs:
			fmt.Fprintf(w, "%s\n", m.Subject)
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range m.Header {
					if !yield(k) {
						return
					}
				}
			}) {
				fmt.Fprintf(w, "  %s: %s\n", k, strings.Join(m.Header[k], ", "))
			}
			fmt.Fprintf(w, "  %s\n", m.Data)
		case <-stop:
			return nil
		}
	}
	return nil
}
