// Package natstest runs a real NATS server with JetStream inside the test
// process, on a random port with its own store, so that each test controls
// it: stop it, restart it, read what arrived.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an in-process NATS server.
type Server struct {
	t          testing.TB
	opts       server.Options
	srv        *server.Server
	js         jetstream.JetStream // the tests' own client, made on first use
	clientOpts []nats.Option
}

// Start runs a server with JetStream on a random port for t, shut down at
// cleanup. configure, when given, adjusts the options (say MaxPayload).
func Start(t testing.TB, configure ...func(*server.Options)) *Server {
	t.Helper()
	opts := server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	for _, f := range configure {
		f(&opts)
	}
	s := &Server{t: t, opts: opts}
	s.start()
	// Later restarts keep the port, so that clients reconnect.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		s.t.Fatalf("create NATS server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatalf("NATS server not ready")
	}
	s.srv = srv
}

// URL returns the client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port) }

// Stop shuts the server down; Restart starts it again with the same store.
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Restart starts a stopped server again on the same port and store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// RestartWith restarts the server with its options changed by configure
// (say, other users), on the same port and store.
func (s *Server) RestartWith(configure ...func(*server.Options)) {
	s.t.Helper()
	s.Stop()
	for _, f := range configure {
		f(&s.opts)
	}
	s.start()
}

// SetClientOptions sets the options the tests' own clients (Connect,
// JetStream) connect with: credentials and TLS for a server that requires
// them. Call it before using those clients.
func (s *Server) SetClientOptions(opts ...nats.Option) { s.clientOpts = opts }

// TotalConnections returns how many client connections the server has
// accepted since it last started, those it then refused included.
func (s *Server) TotalConnections() uint64 {
	s.t.Helper()
	v, err := s.srv.Varz(nil)
	if err != nil {
		s.t.Fatalf("NATS server varz: %v", err)
	}
	return v.TotalConnections
}

// URLFor returns the client URL with a user's credentials in it.
func (s *Server) URLFor(user, password string) string {
	return fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, password, s.opts.Port)
}

// Connect returns a client connection, closed at cleanup. When the server
// has users, it connects as the first one (make it the tests' admin).
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	url := s.URL()
	if len(s.opts.Users) > 0 {
		url = s.URLFor(s.opts.Users[0].Username, s.opts.Users[0].Password)
	}
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, s.clientOpts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to test NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream client for the tests' own use (creating
// streams, reading them). It reconnects across Restart.
func (s *Server) JetStream() jetstream.JetStream {
	if s.js == nil {
		js, err := jetstream.New(s.Connect(s.t))
		if err != nil {
			s.t.Fatal(err)
		}
		s.js = js
	}
	return s.js
}

// CreateStream creates a file-backed stream capturing subjects, with a
// duplicate window of two minutes (the JetStream default).
func (s *Server) CreateStream(t testing.TB, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.JetStream().CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   subjects,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	return st
}

// Messages returns every message stored in stream, in stream order. It
// reads them with an ordered consumer in batches of a thousand (one request
// per message is too slow on a loaded machine), allowing a second per
// thousand messages on top of a base of 30.
func (s *Server) Messages(t testing.TB, stream string) []*nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	want := int(info.State.Msgs)
	if want == 0 {
		return nil
	}
	// As generous as relaytest.Budget: a loaded machine (a second test
	// suite beside this one, the race detector) reads a few hundred
	// messages a second.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second+time.Duration(want)*5*time.Millisecond)
	defer cancel()
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("read stream %s: %v", stream, err)
	}
	// Tests that poll the stream would otherwise leave a consumer behind
	// per call, up to the server's limit.
	defer func() { _ = st.DeleteConsumer(context.Background(), cons.CachedInfo().Name) }()
	msgs := make([]*nats.Msg, 0, want)
	for len(msgs) < want {
		if ctx.Err() != nil {
			t.Fatalf("read stream %s: %d of %d messages after %s", stream, len(msgs), want, ctx.Err())
		}
		batch, err := cons.Fetch(min(1000, want-len(msgs)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, &nats.Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers()})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("read stream %s: %v", stream, err)
		}
	}
	return msgs
}

// Count returns the number of messages stored in stream.
func (s *Server) Count(t testing.TB, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.Msgs
}
