package rabbitmq_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/rabbitmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// consume is the consumer docs/sinks.md shows (a test keeps the two
// identical).
func consume(ctx context.Context, ch *amqp.Channel, db *pgxpool.Pool, queue string, handle func(context.Context, pgx.Tx, amqp.Delivery) error) error {
	if err := ch.Qos(50, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for d := range deliveries {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// The message_id and the effect commit together, or neither.
			tag, err := tx.Exec(ctx, "INSERT INTO processed_messages (message_id) VALUES ($1) ON CONFLICT DO NOTHING", d.MessageId)
			if err != nil || tag.RowsAffected() == 0 {
				return err // nil for a duplicate: handled before, acknowledge it
			}
			return handle(ctx, tx, d)
		})
		if err != nil {
			// Not handled: back to the queue, to be tried again.
			if err := d.Nack(false, true); err != nil {
				return err
			}
			continue
		}
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("the channel closed: reconnect and consume again")
}

func TestDocs_ConsumerIsTheTestedOne(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("consumer_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/sinks.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func consume(")
	end := start + strings.Index(s[start:], "\n}\n") + len("\n}\n")
	if !strings.Contains(string(doc), "```go\n"+s[start:end]+"```\n") {
		t.Error("docs/sinks.md does not show consume exactly as consumer_test.go has it: copy it into the RabbitMQ section")
	}
}

func TestConsumer_HandlesEachMessageOnceAndAcknowledges(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `
CREATE TABLE processed_messages (message_id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE orders_seen (message_id text NOT NULL, body bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	v := rabbitmqtest.New(t)
	v.BindQueue(t, queue, rabbitmq.ExchangeDefault, sinktest.Topic, nil)
	s := newSink(t, v, nil)
	msgs := sinktest.Messages(t, 4)
	mustDeliver(t, s, msgs)
	mustDeliver(t, s, msgs[1:3]) // sent again, as after a lost confirm

	conn, err := amqp.Dial(v.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	failedOnce := false
	done := make(chan error, 1)
	go func() {
		done <- consume(ctx, ch, pool, queue, func(ctx context.Context, tx pgx.Tx, d amqp.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if !failedOnce {
				// The first attempt fails: its message comes back.
				failedOnce = true
				return errors.New("handler failed")
			}
			_, err := tx.Exec(ctx, "INSERT INTO orders_seen VALUES ($1, $2)", d.MessageId, d.Body)
			return err
		})
	}()
	waitfor.Condition(t, 15*time.Second, "every message handled and acknowledged", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM orders_seen").Scan(&n)
		return n >= len(msgs) && v.Count(t, queue) == 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("consume returned %v, want context.Canceled", err)
	}
	rows, err := pool.Query(context.Background(), "SELECT message_id FROM orders_seen ORDER BY message_id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range msgs {
		want = append(want, m.IdempotencyKey)
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("handled %v, want each message once: %v", ids, want)
	}
}
