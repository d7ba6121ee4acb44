// Package kafkatest starts franz-go's kfake Kafka cluster in process for
// tests: a fake that speaks the Kafka protocol (idempotent produce, SASL,
// fault injection), keeps its data in a directory so that it can be stopped
// and started again, and reads back what was written.
package kafkatest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is a kfake cluster, closed at cleanup.
type Cluster struct {
	t     testing.TB
	opts  []kfake.Opt
	dir   string
	ports []int
	// clientOpts go to every client of the harness.
	clientOpts []kgo.Opt

	mu sync.Mutex
	c  *kfake.Cluster
}

// Start starts a cluster of three brokers on random ports with
// automatic topic creation off, as production clusters usually run, and
// opts applied after that.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir(), opts: append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)}
	c.start(nil)
	t.Cleanup(c.Stop)
	return c
}

// start starts the cluster on ports (random ones when nil), from the data
// in c.dir.
func (c *Cluster) start(ports []int) {
	c.t.Helper()
	opts := append(c.opts, kfake.DataDir(c.dir))
	if ports != nil {
		opts = append(opts, kfake.Ports(ports...))
	}
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		c.t.Fatalf("start kfake: %v", err)
	}
	c.ports = c.ports[:0]
	for _, a := range kc.ListenAddrs() {
		_, p, _ := strings.Cut(a, ":")
		port, _ := strconv.Atoi(p)
		c.ports = append(c.ports, port)
	}
	c.mu.Lock()
	c.c = kc
	c.mu.Unlock()
}

// Brokers returns the brokers' addresses, host:port.
func (c *Cluster) Brokers() []string {
	var out []string
	for _, p := range c.ports {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out
}

// BrokerList returns the brokers' addresses as KAFKA_BROKERS takes them.
func (c *Cluster) BrokerList() string { return strings.Join(c.Brokers(), ",") }

// Fake returns the running kfake cluster, for fault injection
// (ControlKey).
func (c *Cluster) Fake() *kfake.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Stop closes every broker and every connection to them; the data stays.
func (c *Cluster) Stop() {
	c.mu.Lock()
	kc := c.c
	c.mu.Unlock()
	kc.Close()
}

// Restart starts the cluster again on the same ports, with the data it had
// when it stopped.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.start(append([]int(nil), c.ports...))
}

// SetClientOpts gives every later client of the harness opts: the SASL of
// a user allowed everything, TLS, on a cluster that requires them.
func (c *Cluster) SetClientOpts(opts ...kgo.Opt) { c.clientOpts = opts }

// Client returns a client of the cluster with opts, closed at cleanup.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers()...)}, c.clientOpts...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of the cluster, closed at cleanup.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopic creates topic with partitions partitions.
func (c *Cluster) CreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Admin(t).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// Records returns every record of topics, partition by partition in offset
// order, read from the start up to the end offsets of the moment.
func (c *Cluster) Records(t testing.TB, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := c.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %v: %v", topics, err)
	}
	want := map[string]map[int32]int64{}
	parts := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic], parts[o.Topic] = map[int32]int64{}, map[int32]kgo.Offset{}
			}
			want[o.Topic][o.Partition] = o.Offset
			parts[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl := c.Client(t, kgo.ConsumePartitions(parts))
	var out []*kgo.Record
	for len(want) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v: %v (still missing %v)", topics, ctx.Err(), want)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s/%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			out = append(out, r)
			if r.Offset == end-1 {
				delete(want[r.Topic], r.Partition)
				if len(want[r.Topic]) == 0 {
					delete(want, r.Topic)
				}
			}
		})
	}
	return out
}
