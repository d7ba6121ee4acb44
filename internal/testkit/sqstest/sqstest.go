// Package sqstest runs an Amazon SQS (and SNS, sns.go) emulator for tests: fauxqs (an npm
// package, run with Node.js as a process of its own on a free loopback
// port), which speaks the AWS JSON protocol the SDK for Go v2 uses and
// has FIFO queues (MessageGroupId order, MessageDeduplicationId,
// content-based dedup) and MaximumMessageSize.
//
// What fauxqs does not do, and the tests therefore cannot prove against
// it: SQS's five-minute deduplication window (fauxqs dedups, but its
// window is not SQS's), fair queues' per-group fairness, throttling,
// the 10-attribute and attribute-name rules (fauxqs takes more), the
// MessageGroupId and MessageDeduplicationId character rules, credentials
// and IAM (it takes any). The sink's own tests check those mappings
// against SQS's documented rules instead.
//
// fauxqs 1.9.2 runs on Node.js 20 (2.x needs 22.5). The kit looks for it
// in $OUTBOX_RELAY_FAUXQS (the fauxqs program), then under
// ~/.cache/outbox-relay/fauxqs, which .ci/prerequisites fills; without it
// the tests fail, naming the command that installs it.
package sqstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Version is the fauxqs the kit runs.
const Version = "1.9.2"

// Region is the region the emulator's queues are in.
const Region = "us-east-1"

// Credentials are the (ignored) credentials tests send.
var Credentials = credentials.NewStaticCredentialsProvider("test", "test", "")

// Server is one fauxqs process.
type Server struct {
	bin  string
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	queues map[string]map[string]string // name → attributes, for Start after Stop
	topics map[string]bool              // SNS topics, each with its queue, for Start after Stop
	got    map[string][]types.Message   // queue URL → every message received
}

// Program returns the path of the fauxqs program, or an error saying how
// to install it.
func Program() (string, error) {
	if p := os.Getenv("OUTBOX_RELAY_FAUXQS"); p != "" {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err == nil {
		p := filepath.Join(home, ".cache", "outbox-relay", "fauxqs", "node_modules", ".bin", "fauxqs")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the SQS emulator fauxqs is not installed: run .ci/prerequisites, or npm install --prefix ~/.cache/outbox-relay/fauxqs fauxqs@%s (Node.js 20 or later), or set OUTBOX_RELAY_FAUXQS to its program", Version)
}

// Start starts a fauxqs on a free loopback port, stopped at cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{bin: bin, queues: map[string]map[string]string{}, got: map[string][]types.Message{}}
	t.Cleanup(s.Stop)
	// A free port may be taken by another test's server before this one
	// binds it (test packages run in parallel): then this one exits, and
	// another port is tried.
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if !errors.Is(err, errPortTaken) {
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	t.Fatalf("fauxqs: five free ports in a row were taken before it could bind them")
	return nil
}

// errPortTaken is launch's error when the emulator exited without
// listening: another process took the port first.
var errPortTaken = errors.New("the port was taken")

// launch starts the emulator on s.port and waits until it listens there
// itself (a listening socket of its process, read from /proc, so that a
// server of another test on the same port does not count). s.mu is held.
func (s *Server) launch() error {
	cmd := exec.Command(s.bin)
	cmd.Env = append(os.Environ(), "FAUXQS_PORT="+strconv.Itoa(s.port), "FAUXQS_HOST=127.0.0.1", "FAUXQS_LOGGER=false", "FAUXQS_DEFAULT_REGION="+Region)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if testing.Verbose() {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start fauxqs (%s): %w", s.bin, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		ours, known := listening(cmd.Process.Pid, s.port)
		if ours {
			return nil
		}
		if exited(cmd.Process.Pid) {
			_ = cmd.Wait()
			s.cmd = nil
			return errPortTaken
		}
		if !known {
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second); err == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fauxqs did not listen on port %d within 30s", s.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listening reports whether process pid holds a listening socket of
// port; known is false where /proc cannot say.
func listening(pid, port int) (ours, known bool) {
	// fauxqs listens on every interface, whatever FAUXQS_HOST says: any
	// listening socket of the port counts, IPv4 or IPv6.
	var inodes []string
	suffix := fmt.Sprintf(":%04X", port)
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		table, err := os.ReadFile(name)
		if err != nil {
			return false, false
		}
		for _, line := range strings.Split(string(table), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && strings.HasSuffix(f[1], suffix) && f[3] == "0A" {
				inodes = append(inodes, "socket:["+f[9]+"]")
			}
		}
	}
	if len(inodes) == 0 {
		return false, true
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return false, false
	}
	for _, fd := range fds {
		if link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && slices.Contains(inodes, link) {
			return true, true
		}
	}
	return false, true
}

// exited reports whether process pid has ended (a zombie until waited).
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// Endpoint is the emulator's URL, for SQS_ENDPOINT.
func (s *Server) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// AccountURL is the queue URL of the emulator's account, ending in a
// slash: the relay's SQS_QUEUE_URL for a queue per topic.
func (s *Server) AccountURL() string { return s.Endpoint() + "/000000000000/" }

// Start starts the emulator (again, after Stop, on the same port, with
// the queues and topics made before, empty).
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	if err := s.launch(); err != nil {
		t.Fatalf("restart fauxqs on port %d: %v", s.port, err)
	}
	for name, attrs := range s.queues {
		if _, err := s.create(name, attrs); err != nil {
			t.Fatalf("create queue %s again: %v", name, err)
		}
	}
	for name := range s.topics {
		if _, err := s.createTopic(name); err != nil {
			t.Fatalf("create topic %s again: %v", name, err)
		}
	}
}

// Stop kills the emulator; what it held is lost.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Client returns an SDK client for the emulator.
func (s *Server) Client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       Region,
		Credentials:  Credentials,
		BaseEndpoint: aws.String(s.Endpoint()),
	})
}

// CreateQueue creates queue name with attrs (FifoQueue is set for a name
// ending in .fifo) and returns its URL.
func (s *Server) CreateQueue(t testing.TB, name string, attrs map[string]string) string {
	t.Helper()
	if attrs == nil {
		attrs = map[string]string{}
	}
	if filepath.Ext(name) == ".fifo" {
		attrs["FifoQueue"] = "true"
	}
	s.mu.Lock()
	s.queues[name] = attrs
	s.mu.Unlock()
	u, err := s.create(name, attrs)
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	return u
}

func (s *Server) create(name string, attrs map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := s.Client().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

// Received returns every message queue url has had, in the order they were
// received: it receives (and deletes) what is visible now and adds it to
// what earlier calls received.
func (s *Server) Received(t testing.TB, url string) []types.Message {
	t.Helper()
	cl := s.Client()
	// Patience runs from the last receive that returned anything: a
	// receive whose answer was lost (a retried request on a loaded
	// machine) leaves its messages invisible, and their FIFO groups
	// locked, for the visibility timeout, however late in the drain it
	// came.
	patience := time.Now().Add(2 * visibility)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := cl.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			VisibilityTimeout:           int32(visibility / time.Second),
		})
		cancel()
		if err != nil {
			var nq *types.QueueDoesNotExist
			if errors.As(err, &nq) {
				break
			}
			t.Fatalf("receive from %s: %v", url, err)
		}
		if len(out.Messages) == 0 {
			// The queue is drained only when it holds nothing at all:
			// messages it still counts (invisible, delayed, or in a
			// group a lost receive locked) are waited for rather than
			// reported missing.
			left := s.left(cl, url)
			if left == "" {
				break
			}
			if time.Now().After(patience) {
				t.Logf("sqstest: %s still holds messages after %s without receiving any: %s", url, 2*visibility, left)
				break
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		patience = time.Now().Add(2 * visibility)
		var del []types.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		dout, err := cl.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del})
		cancel()
		if err != nil {
			t.Fatalf("delete from %s: %v", url, err)
		}
		if len(dout.Failed) > 0 {
			t.Fatalf("delete from %s: %s: %s", url, aws.ToString(dout.Failed[0].Code), aws.ToString(dout.Failed[0].Message))
		}
		s.mu.Lock()
		s.got[url] = append(s.got[url], out.Messages...)
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]types.Message(nil), s.got[url]...)
}

// visibility is how long a message Received took stays invisible.
const visibility = 5 * time.Second

// left describes what queue url still counts (visible, not visible or
// delayed messages), "" when it counts none.
func (s *Server) left(cl *sqs.Client, url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	a, err := cl.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: counts})
	if err != nil {
		var nq *types.QueueDoesNotExist
		if errors.As(err, &nq) {
			return ""
		}
		return "its counts unread: " + err.Error()
	}
	var left []string
	for _, c := range counts {
		if n := a.Attributes[string(c)]; n != "" && n != "0" {
			left = append(left, string(c)+"="+n)
		}
	}
	return strings.Join(left, " ")
}

// Purge forgets what queue url has received.
func (s *Server) Purge(t testing.TB, url string) {
	s.Received(t, url)
	s.mu.Lock()
	delete(s.got, url)
	s.mu.Unlock()
}
