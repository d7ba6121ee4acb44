// Package pubsubtest starts Google's Pub/Sub fake (pstest) in process for
// tests: a gRPC server that speaks the Pub/Sub API on a random port,
// reachable as a client library reaches an emulator (PUBSUB_EMULATOR_HOST).
// pstest's own gRPC server takes requests of at most 4 MiB, gRPC's
// default, where Pub/Sub takes 10 MB: the kit serves pstest's service on
// a gRPC server of its own that takes what Pub/Sub does.
// It can be stopped and started again on the same port (its topics are
// created again and the messages it had kept), made to fail publishes,
// and it refuses, as Pub/Sub does, every publish request over Pub/Sub's
// documented limits, which pstest itself does not check (Limits).
package pubsubtest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Project is the project of every topic of the fake.
const Project = "outbox-relay-test"

// Server is a pstest server, closed at cleanup.
type Server struct {
	t    testing.TB
	port int
	// fail, when set, decides the outcome of each publish request before
	// the fake stores it: a non-nil error is returned to the client.
	fail atomic.Pointer[func(*pubsubpb.PublishRequest) error]

	mu      sync.Mutex
	srv     *pstest.Server // nil while stopped
	gsrv    *grpc.Server   // serves srv's service on port
	topics  []string       // full names, created again at restart
	kept    []*pstest.Message
	stopped bool
}

// Start starts a fake on a random port.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t}
	s.start(0)
	t.Cleanup(s.Stop)
	return s
}

// reactor runs the Server's checks on every publish request.
type reactor struct{ s *Server }

func (r reactor) React(req any) (bool, any, error) {
	pr, ok := req.(*pubsubpb.PublishRequest)
	if !ok {
		return false, nil, nil
	}
	if err := Limits(pr); err != nil {
		return true, nil, err
	}
	if f := r.s.fail.Load(); f != nil {
		if err := (*f)(pr); err != nil {
			return true, nil, err
		}
	}
	return false, nil, nil
}

// requestBytesMax is the largest request the fake takes: Pub/Sub's 10 MB
// publish request, with room for gRPC's framing.
const requestBytesMax = 10e6 + 64<<10

func (s *Server) start(port int) {
	s.t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		s.t.Fatalf("listen for the Pub/Sub fake: %v", err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	// pstest listens on a port of its own too, unused.
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: reactor{s}})
	gsrv := grpc.NewServer(grpc.MaxRecvMsgSize(requestBytesMax))
	pubsubpb.RegisterPublisherServer(gsrv, &srv.GServer)
	pubsubpb.RegisterSubscriberServer(gsrv, &srv.GServer)
	pubsubpb.RegisterSchemaServiceServer(gsrv, &srv.GServer)
	go func() { _ = gsrv.Serve(l) }()
	for _, name := range s.topics {
		if _, err := srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: name}); err != nil {
			s.t.Fatalf("create topic %s again: %v", name, err)
		}
	}
	s.mu.Lock()
	s.srv, s.gsrv, s.stopped = srv, gsrv, false
	s.mu.Unlock()
}

// Addr is the fake's address, host:port, as PUBSUB_EMULATOR_HOST takes it.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// TopicName is the full name of topic ID id.
func TopicName(id string) string { return "projects/" + Project + "/topics/" + id }

// CreateTopic creates the topic with ID id.
func (s *Server) CreateTopic(t testing.TB, id string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: TopicName(id)}); err != nil {
		t.Fatalf("create topic %s: %v", id, err)
	}
	s.topics = append(s.topics, TopicName(id))
}

// FailPublish makes every later publish request go through f first: when
// it returns an error (a gRPC status, like status.Error(codes.Unavailable,
// …)), the fake stores nothing and answers with it. nil stops it.
func (s *Server) FailPublish(f func(*pubsubpb.PublishRequest) error) {
	if f == nil {
		s.fail.Store(nil)
		return
	}
	s.fail.Store(&f)
}

// Messages returns every message published to topic ID id so far, in the
// order the fake took them, from before a restart too.
func (s *Server) Messages(id string) []*pstest.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := slices.Clone(s.kept)
	if !s.stopped {
		all = append(all, s.srv.Messages()...)
	}
	var out []*pstest.Message
	for _, m := range all {
		if m.Topic == TopicName(id) {
			out = append(out, m)
		}
	}
	return out
}

// Purge forgets every message published so far.
func (s *Server) Purge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept = nil
	if !s.stopped {
		s.srv.ClearMessages()
	}
}

// Stop closes the fake and every connection to it; its messages are kept.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.kept = append(s.kept, s.srv.Messages()...)
	s.gsrv.Stop()
	_ = s.srv.Close()
	s.stopped = true
}

// Restart starts the fake again on the same port, with its topics.
func (s *Server) Restart() {
	s.t.Helper()
	s.start(s.port)
}

// Limits returns the error Pub/Sub answers a publish request with when it
// breaks one of its documented limits
// (https://cloud.google.com/pubsub/quotas#resource_limits), which pstest
// does not check: a request of at most 1,000 messages and 10 MB; a
// message with data or attributes; at most 100 attributes, names of at
// most 256 bytes not starting with goog, values of at most 1,024 bytes;
// an ordering key of at most 1,024 bytes, the same for every message of
// the request.
func Limits(req *pubsubpb.PublishRequest) error {
	invalid := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	if n := len(req.GetMessages()); n == 0 || n > 1000 {
		return invalid("a publish request holds %d messages", n)
	}
	if n := len(req.GetTopic()) + 5; n > 10e6 {
		return invalid("request too large")
	}
	size := len(req.GetTopic())
	key := req.GetMessages()[0].GetOrderingKey()
	for _, m := range req.GetMessages() {
		size += len(m.GetData()) + len(m.GetOrderingKey())
		if len(m.GetData()) == 0 && len(m.GetAttributes()) == 0 {
			return invalid("a message has neither data nor attributes")
		}
		if len(m.GetAttributes()) > 100 {
			return invalid("a message has %d attributes, more than 100", len(m.GetAttributes()))
		}
		for k, v := range m.GetAttributes() {
			size += len(k) + len(v)
			switch {
			case len(k) > 256:
				return invalid("an attribute name of %d bytes, more than 256", len(k))
			case len(v) > 1024:
				return invalid("attribute %s has a value of %d bytes, more than 1024", k, len(v))
			case strings.HasPrefix(strings.ToLower(k), "goog"):
				return invalid("attribute %s: names starting with goog are reserved", k)
			}
		}
		if len(m.GetOrderingKey()) > 1024 {
			return invalid("an ordering key of %d bytes, more than 1024", len(m.GetOrderingKey()))
		}
		if m.GetOrderingKey() != key {
			return invalid("the messages of a publish request have different ordering keys")
		}
	}
	if size > 10e6 {
		return invalid("a publish request of more than %d bytes", int(10e6))
	}
	return nil
}

// String names the fake in test logs.
func (s *Server) String() string { return fmt.Sprintf("pstest at %s", s.Addr()) }
