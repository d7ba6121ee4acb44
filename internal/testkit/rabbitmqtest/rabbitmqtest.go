// Package rabbitmqtest gives each test a virtual host of its own on the real
// RabbitMQ broker of this machine (127.0.0.1:5672, user guest, the Debian
// package's defaults), created with rabbitmqctl and deleted at cleanup, with
// helpers to bind queues, read back what arrived, and act as the broker's
// operator does: close connections, delete the virtual host, raise a memory
// alarm.
//
// When no broker is reachable, or rabbitmqctl is missing, the test fails
// with instructions: broker tests never skip.
package rabbitmqtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
)

// Addr is the broker the tests use; rabbitmqctl manages the node on this
// machine that listens there.
const Addr = "127.0.0.1:5672"

const howToStart = "These tests need a real RabbitMQ on " + Addr + " (user guest, password guest, rabbitmqctl on the PATH, run as root or the rabbitmq user) and never skip.\n" +
	"Debian: apt-get install rabbitmq-server && rabbitmq-server -detached && rabbitmqctl await_startup; `bash .ci/run` does both."

// VHost is a virtual host for one test.
type VHost struct {
	// Name is the virtual host's name.
	Name string
	// URL reaches it as guest: amqp://guest:guest@127.0.0.1:5672/<name>.
	URL string

	t    testing.TB
	mu   sync.Mutex
	conn *amqp.Connection // the tests' own, reopened after CloseConnections
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// New creates a virtual host for t, with every permission for guest, and
// deletes it at cleanup.
func New(t testing.TB) *VHost {
	t.Helper()
	Reachable(t)
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("outbox-test-%s-%s", strings.Trim(base, "-"), hex.EncodeToString(b[:]))
	Ctl(t, "add_vhost", name)
	v := &VHost{
		Name: name,
		URL:  "amqp://guest:guest@" + Addr + "/" + url.PathEscape(name),
		t:    t,
	}
	t.Cleanup(func() {
		v.mu.Lock()
		if v.conn != nil {
			_ = v.conn.Close()
		}
		v.mu.Unlock()
		v.Delete(t)
	})
	Ctl(t, "set_permissions", "-p", name, "guest", ".*", ".*", ".*")
	return v
}

// Reachable fails t, with instructions, unless the broker accepts
// connections and rabbitmqctl can be run.
func Reachable(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("no RabbitMQ reachable at %s: %v\n%s", Addr, err, howToStart)
	}
	_ = c.Close()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatalf("rabbitmqctl is not on the PATH: %v\n%s", err, howToStart)
	}
}

// Ctl runs rabbitmqctl with args and returns its output, failing t when it
// fails.
func Ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", append([]string{"--quiet"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s\n%s", strings.Join(args, " "), err, out, howToStart)
	}
	return string(out)
}

// Delete deletes the virtual host, closing its connections: the broker
// then refuses the sink's reconnections (530 NOT_ALLOWED) until the test
// ends. Deleting it again does nothing.
func (v *VHost) Delete(t testing.TB) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "--quiet", "delete_vhost", v.Name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		t.Errorf("rabbitmqctl delete_vhost %s: %v\n%s", v.Name, err, out)
	}
}

// CloseConnections has the broker close every connection to the virtual
// host, with reason, as an operator or a node shutting down would.
func (v *VHost) CloseConnections(t testing.TB, reason string) {
	t.Helper()
	Ctl(t, "close_all_connections", "--vhost", v.Name, "--limit", "1000", reason)
}

// Connections returns the number of client connections to the virtual
// host, the tests' own included.
func (v *VHost) Connections(t testing.TB) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(Ctl(t, "list_connections", "vhost"), "\n") {
		if strings.TrimSpace(line) == v.Name {
			n++
		}
	}
	return n
}

// channel returns a channel on the tests' own connection, reopening the
// connection when it was closed.
func (v *VHost) channel(t testing.TB) *amqp.Channel {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.conn == nil || v.conn.IsClosed() {
		c, err := amqp.Dial(v.URL)
		if err != nil {
			t.Fatalf("connect to RabbitMQ virtual host %s: %v\n%s", v.Name, err, howToStart)
		}
		v.conn = c
	}
	ch, err := v.conn.Channel()
	if err != nil {
		t.Fatalf("open a channel on virtual host %s: %v", v.Name, err)
	}
	return ch
}

// DeclareExchange declares a durable exchange of kind (topic, direct, …).
func (v *VHost) DeclareExchange(t testing.TB, name, kind string) {
	t.Helper()
	ch := v.channel(t)
	defer ch.Close()
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange %s: %v", name, err)
	}
}

// BindQueue declares the durable queue with args (nil for a plain classic
// queue) and binds it to exchange for routingKey (a binding key: topic
// exchanges take * and # wildcards).
func (v *VHost) BindQueue(t testing.TB, queue, exchange, routingKey string, args amqp.Table) {
	t.Helper()
	ch := v.channel(t)
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		t.Fatalf("declare queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, routingKey, exchange, false, nil); err != nil {
		t.Fatalf("bind queue %s to %s for %s: %v", queue, exchange, routingKey, err)
	}
}

// Count returns the number of ready messages in queue.
func (v *VHost) Count(t testing.TB, queue string) int {
	t.Helper()
	ch := v.channel(t)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// Purge removes every message from queue.
func (v *VHost) Purge(t testing.TB, queue string) {
	t.Helper()
	ch := v.channel(t)
	defer ch.Close()
	if _, err := ch.QueuePurge(queue, false); err != nil {
		t.Fatalf("purge queue %s: %v", queue, err)
	}
}

// Take removes and returns every message ready in queue now, in queue
// order.
func (v *VHost) Take(t testing.TB, queue string) []amqp.Delivery {
	t.Helper()
	ch := v.channel(t)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("read queue %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// WaitTake waits until queue holds at least n ready messages, then takes
// every message in it.
func (v *VHost) WaitTake(t testing.TB, queue string, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	waitfor.Condition(t, timeout, fmt.Sprintf("%d messages in queue %s", n, queue), func() bool { return v.Count(t, queue) >= n })
	return v.Take(t, queue)
}

// MemoryAlarm sets a memory alarm on the broker, which blocks every
// publishing connection (connection.blocked) on every virtual host, and
// returns a function that clears it; the alarm is cleared at cleanup in any
// case. Tests that raise it must not run in parallel with others that
// publish.
func MemoryAlarm(t testing.TB) (lift func()) {
	t.Helper()
	Reachable(t)
	// {absolute,N} or a fraction of the machine's memory, as configured.
	was := strings.TrimSpace(Ctl(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	restore := []string{"set_vm_memory_high_watermark", was}
	if m := regexp.MustCompile(`^\{absolute,(\d+)\}$`).FindStringSubmatch(was); m != nil {
		restore = []string{"set_vm_memory_high_watermark", "absolute", m[1]}
	}
	var once sync.Once
	lift = func() {
		once.Do(func() {
			Ctl(t, restore...)
			waitfor.Condition(t, 30*time.Second, "the memory alarm to clear", func() bool {
				return !strings.Contains(Ctl(t, "eval", "rabbit_alarm:get_alarms()."), "memory")
			})
		})
	}
	t.Cleanup(lift)
	Ctl(t, "set_vm_memory_high_watermark", "0.0000001")
	return lift
}
