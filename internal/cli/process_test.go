package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// binary is the outbox-relay binary the process tests run, built once.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-relay-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outbox-relay")
	build := exec.Command("go", "build", "-o", binary, repoRoot)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build outbox-relay for the process tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// process is a running outbox-relay binary.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	lines []string
	addr  string
}

// startProcess runs the binary's relay (run) with env added to a minimal
// environment, logging JSON, serving HTTP on a free port.
func startProcess(t *testing.T, env ...string) *process {
	t.Helper()
	return startCommand(t, []string{"run"}, append([]string{"RELAY_HTTP_ADDR=127.0.0.1:0"}, env...)...)
}

// startCommand runs the binary with args (startProcess runs `run`),
// logging JSON, with env added to a minimal environment; it is killed at
// cleanup.
func startCommand(t *testing.T, args []string, env ...string) *process {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "LOG_FORMAT=json"}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, cmd: cmd, done: make(chan struct{})}
	go p.read(stderr)
	t.Cleanup(func() {
		if p.running() {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", strings.Join(args, " "), strings.Join(p.log(), "\n"))
		}
	})
	return p
}

func (p *process) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var entry struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		_ = json.Unmarshal([]byte(line), &entry)
		p.mu.Lock()
		p.lines = append(p.lines, line)
		if entry.Addr != "" && strings.HasPrefix(entry.Msg, "serving /metrics") {
			p.addr = entry.Addr
		}
		p.mu.Unlock()
	}
	_ = p.cmd.Wait()
	close(p.done)
}

func (p *process) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// metrics scrapes /metrics once the endpoint is up.
func (p *process) metrics() string {
	p.t.Helper()
	waitfor.Condition(p.t, 20*time.Second, "the metrics endpoint", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.addr != ""
	})
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("relay did not exit within %s", timeout)
		return -1
	}
}

func relayEnv(db *dbtest.Schema, srv *natstest.Server, extra ...string) []string {
	return append([]string{
		"DATABASE_URL=" + db.URL,
		"RELAY_SCHEMA=" + db.Name,
		"NATS_URL=" + srv.URL(),
	}, extra...)
}

func TestProcess_SIGKILLMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Exclusive(t, "many relays, many events")
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	const n = 8000
	relaytest.InsertRows(t, db, n, "events.orders.created")
	env := relayEnv(db, srv, "RELAY_LEASE=4s", "NATS_ACK_TIMEOUT=1s", "RELAY_BATCH_SIZE=100")

	first := startProcess(t, env...)
	waitfor.Condition(t, 30*time.Second, "deliveries to start while rows are leased", func() bool {
		var archived, leased int
		err := db.Pool.QueryRow(context.Background(),
			"SELECT (SELECT count(*) FROM "+db.Table("archive")+"), (SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_until > now())").Scan(&archived, &leased)
		return err == nil && archived > 0 && leased > 0
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(10 * time.Second)
	var orphaned int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_by IS NOT NULL").Scan(&orphaned); err != nil {
		t.Fatal(err)
	}
	if db.Count(t, "messages_all") == 0 {
		t.Fatal("the relay finished before it was killed; the test proves nothing")
	}
	t.Logf("killed with %d rows left, %d of them leased by the dead relay", db.Count(t, "messages_all"), orphaned)

	second := startProcess(t, env...)
	relaytest.WaitDrained(t, db, relaytest.Budget(n))
	relaytest.AssertStreamMatchesArchive(t, db, srv, "EVENTS", n)
	if orphaned > 0 && !strings.Contains(second.metrics(), "outbox_relay_lease_rescues_total") {
		t.Error("/metrics does not report lease rescues")
	}

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := second.wait(20 * time.Second); code != 0 {
		t.Errorf("after SIGTERM the relay exited %d, want 0", code)
	}
}

func TestProcess_SIGTERMDrainsAndExitsZero(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv, "RELAY_DRAIN_TIMEOUT=2s")...)
	relaytest.InsertRows(t, db, 2000, "events.a")
	waitfor.Condition(t, 30*time.Second, "some deliveries", func() bool { return db.Count(t, "archive") > 0 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(15 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	var leased int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Table("messages")+" WHERE leased_until > now()").Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d rows are still leased after a clean shutdown", leased)
	}
	if !strings.Contains(strings.Join(p.log(), "\n"), `"relay stopped"`) {
		t.Error("no 'relay stopped' log line")
	}
}

func TestProcess_SIGTERMDuringAHangingWebhookExitsWithinTheDrainTimeout(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	hanging := make(chan struct{}, 1)
	rcv.RespondWith(func(w http.ResponseWriter, r *http.Request) int {
		select {
		case hanging <- struct{}{}:
		default:
		}
		return rcv.Hang(r) // never answers
	})
	p := startProcess(t,
		"DATABASE_URL="+db.URL, "RELAY_SCHEMA="+db.Name,
		"WEBHOOK_URL="+rcv.URL, "WEBHOOK_SECRET="+rcv.Secret, "WEBHOOK_TIMEOUT=15s", "RELAY_LEASE=30s",
		"RELAY_DRAIN_TIMEOUT=1s")
	relaytest.InsertRows(t, db, 20, "orders.created")
	select {
	case <-hanging:
	case <-time.After(20 * time.Second):
		t.Fatal("no request reached the receiver")
	}
	began := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(15 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	// The drain timeout (1s) plus the time to settle what was released.
	if took := time.Since(began); took > 7*time.Second {
		t.Errorf("the relay took %s to stop with RELAY_DRAIN_TIMEOUT=1s", took)
	}
	var leased, attempts int
	err := db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE leased_until > now()), coalesce(sum(attempts), 0) FROM "+db.Table("messages")).Scan(&leased, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	if got := db.Count(t, "messages_all"); got != 20 || leased != 0 || attempts != 0 {
		t.Errorf("after shutdown: %d rows, %d leased, %d attempts counted; want all 20 back, none leased, no attempt spent", got, leased, attempts)
	}
}

func TestProcess_SIGTERMWithAHungDatabaseExitsWithinTheDrainTimeoutAndGrace(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	srv := natstest.Start(t)
	srv.CreateStream(t, "EVENTS", "events.>")
	p := startProcess(t, relayEnv(db, srv, "RELAY_LEASE=60s", "RELAY_DRAIN_TIMEOUT=1s")...)
	p.waitLog(`"relay started"`)
	// The database hangs for the relay: its table is locked.
	conn := db.Conn(t)
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(context.Background(), "LOCK TABLE "+db.Table("messages")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waitfor.Condition(t, 30*time.Second, "a claim stuck behind the lock", func() bool {
		var waiting int
		_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass",
			db.Table("messages")).Scan(&waiting)
		return waiting > 0
	})
	began := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(30 * time.Second)
	// RELAY_DRAIN_TIMEOUT (1s) + the settle grace (5s) + a claim's grace (1s)
	// and a little for the process itself.
	if took := time.Since(began); took > 8*time.Second {
		t.Errorf("the relay took %s to stop with a hung database and RELAY_DRAIN_TIMEOUT=1s", took)
	}
}
