package redis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	redissink "github.com/outbox-relay/outbox-relay/sinks/redis"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

func TestSink_EntryCarriesTheRow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newSink(t, srv, nil)
	msgs := sinktest.Messages(t, 3)
	msgs[0].Key = "order-42"
	msgs[0].Headers = map[string]string{
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"idempotency_key": "forged",
		"x-empty":         "",
	}
	msgs[1].Payload = nil
	msgs[2].Payload = []byte{0x00, 0xff, '\r', '\n'}
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	entries := srv.Entries(t, prefix+sinktest.Topic)
	if len(entries) != 3 {
		t.Fatalf("the stream holds %d entries, want 3", len(entries))
	}
	var names []string
	for _, f := range entries[0].Fields {
		names = append(names, f[0])
	}
	want := []string{"payload", "idempotency_key", "topic", "key", "header:idempotency_key", "header:traceparent", "header:x-empty"}
	if !slices.Equal(names, want) {
		t.Errorf("fields %q, want %q", names, want)
	}
	for field, v := range map[string]string{
		"idempotency_key":    msgs[0].IdempotencyKey,
		"topic":              sinktest.Topic,
		"key":                "order-42",
		"header:traceparent": msgs[0].Headers["traceparent"],
	} {
		if got, _ := entries[0].Field(field); got != v {
			t.Errorf("field %s = %q, want %q", field, got, v)
		}
	}
	if _, ok := entries[1].Field("key"); ok {
		t.Error("a row without a key gave a key field")
	}
	if p, ok := entries[1].Field("payload"); !ok || p != "" {
		t.Errorf("an empty payload arrived as %q, %v", p, ok)
	}
	if p, _ := entries[2].Field("payload"); p != "\x00\xff\r\n" {
		t.Errorf("a binary payload arrived as %q", p)
	}
}

func TestSink_MaxLenTrimsApproximately(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newSink(t, srv, func(c *redissink.Config) { c.MaxLen = 10 })
	for range 10 {
		for i, err := range deliver(t, s, sinktest.Messages(t, 100)) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	// MAXLEN ~ trims whole nodes of 100 entries (stream-node-max-entries).
	if n := len(srv.Entries(t, prefix+sinktest.Topic)); n >= 1000 || n < 10 {
		t.Errorf("the stream holds %d entries after 1000 appends with MAXLEN ~ 10", n)
	}
}

func TestSink_Outcomes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newSink(t, srv, func(c *redissink.Config) { c.MaxMessageBytes = 2048 })
	srv.Do(t, "SET", prefix+"a.string", "not a stream")
	msgs := sinktest.Messages(t, 4)
	msgs[1].Topic = "a.string"
	msgs[2].Payload = make([]byte, 2048)
	errs := deliver(t, s, msgs)
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("ordinary messages: %v, %v", errs[0], errs[3])
	}
	if !sinks.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), "not a stream") {
		t.Errorf("XADD to a string: %v, want permanent, saying it is not a stream", errs[1])
	}
	var limit *sinks.LimitError
	if !sinks.IsPermanent(errs[2]) || !errors.As(errs[2], &limit) || limit.Limit != "REDIS_MAX_MESSAGE_BYTES" {
		t.Errorf("an entry over MaxMessageBytes: %v, want a permanent LimitError", errs[2])
	}

	// Out of memory: transient, and the server still answers.
	srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
	err := deliver(t, s, sinktest.Messages(t, 1))[0]
	if err == nil || sinks.IsPermanent(err) || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("XADD to a server out of memory: %v, want transient, saying so", err)
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
	if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
		t.Errorf("after the memory came back: %v", err)
	}
}

func TestSink_BatchKeepsItsOrderInTheStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newSink(t, srv, nil)
	msgs := sinktest.Messages(t, 500)
	for i := range msgs {
		msgs[i].Key = "k"
	}
	for i, err := range deliver(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	entries := srv.Entries(t, prefix+sinktest.Topic)
	for i, e := range entries {
		if id, _ := e.Field("idempotency_key"); id != msgs[i].IdempotencyKey {
			t.Fatalf("entry %d is %s, want %s: the batch's order is lost", i, id, msgs[i].IdempotencyKey)
		}
	}
}

func TestSink_OutageMakesItUnavailableUntilRedisIsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newSink(t, srv, nil)
	srv.Stop(t)
	waitfor.Condition(t, 15*time.Second, "the sink to see the outage", func() bool { return s.Available() != nil })
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "Redis does not answer") {
		t.Errorf("Available() = %v, want ErrNotAttempted saying Redis does not answer", err)
	}
	for _, err := range deliver(t, s, sinktest.Messages(t, 3)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("a delivery during the outage: %v, want ErrNotAttempted", err)
		}
	}
	srv.Start(t)
	waitfor.Condition(t, 15*time.Second, "the sink to reconnect", func() bool { return s.Available() == nil })
	if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
		t.Errorf("after the outage: %v", err)
	}
}

func TestSink_ACLUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.AddUser(t, "relay", "s3cret", "~test:*", "+xadd", "+ping")

	t.Run("granted", func(t *testing.T) {
		s := newSink(t, srv, func(c *redissink.Config) { c.Username, c.Password = "relay", "s3cret" })
		problems, err := s.CheckStartup(context.Background())
		if err != nil || len(problems) != 0 {
			t.Errorf("CheckStartup: %v, %v; want no problem", problems, err)
		}
		if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
			t.Errorf("deliver: %v", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		s := openSink(t, srv, func(c *redissink.Config) { c.Username, c.Password = "relay", "wrong" })
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		problems, err := s.CheckStartup(ctx)
		if err != nil || len(problems) != 1 || problems[0].Code != redissink.ProblemAuthFailed {
			t.Fatalf("CheckStartup: %v, %v; want auth_failed", problems, err)
		}
		if err := s.Available(); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
			t.Errorf("Available() = %v, want the refusal", err)
		}
		if strings.Contains(s.Available().Error(), "wrong") {
			t.Error("Available's error shows the password")
		}
	})
	t.Run("outside its keys", func(t *testing.T) {
		s := newSink(t, srv, func(c *redissink.Config) {
			c.Username, c.Password, c.StreamPrefix = "relay", "s3cret", "other:"
		})
		problems, err := s.CheckStartup(context.Background())
		if err != nil || len(problems) != 1 || problems[0].Code != redissink.ProblemNoPermission {
			t.Fatalf("CheckStartup: %v, %v; want no_permission", problems, err)
		}
		err = deliver(t, s, sinktest.Messages(t, 1))[0]
		if err == nil || sinks.IsPermanent(err) || !strings.Contains(err.Error(), "+xadd") {
			t.Errorf("deliver outside the user's keys: %v, want transient, naming the grant", err)
		}
	})
}

func TestSink_EvictionPolicyIsAStartupProblem(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Config: []string{"maxmemory-policy allkeys-lru"}})
	s := newSink(t, srv, nil)
	problems, err := s.CheckStartup(context.Background())
	if err != nil || len(problems) != 1 || problems[0].Code != redissink.ProblemEvictionPolicy {
		t.Fatalf("CheckStartup: %v, %v; want eviction_policy", problems, err)
	}
}

func TestSink_TLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	server := ca.Issue(t, "127.0.0.1")
	client := ca.Issue(t)
	srv := redistest.Start(t, redistest.Options{TLS: &redistest.TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, CAFile: ca.CertFile, RequireClientCert: true}})

	t.Run("verified, with a client certificate", func(t *testing.T) {
		s := newSink(t, srv, func(c *redissink.Config) {
			c.URL, c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = srv.TLSURL(), ca.CertFile, client.CertFile, client.KeyFile
		})
		if err := deliver(t, s, sinktest.Messages(t, 1))[0]; err != nil {
			t.Errorf("deliver over TLS: %v", err)
		}
	})
	t.Run("unknown authority", func(t *testing.T) {
		s := openSink(t, srv, func(c *redissink.Config) {
			c.URL, c.TLSCertFile, c.TLSKeyFile = srv.TLSURL(), client.CertFile, client.KeyFile
		})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		problems, err := s.CheckStartup(ctx)
		if err != nil || len(problems) != 1 || problems[0].Code != redissink.ProblemTLSFailed {
			t.Fatalf("CheckStartup: %v, %v; want tls_failed", problems, err)
		}
	})
	t.Run("plaintext URL to the TLS port", func(t *testing.T) {
		s := openSink(t, srv, func(c *redissink.Config) { c.URL = "redis://" + srv.TLSAddr })
		waitfor.Condition(t, 15*time.Second, "a probe to fail", func() bool {
			err := s.Available()
			return err != nil && err.Error() != "delivery not attempted: not connected to Redis yet"
		})
	})
}

func TestNew_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []redissink.Config{
		{URL: "http://127.0.0.1:6379"},
		{URL: "redis://127.0.0.1:6379?pool_size=3"},
		{URL: "redis://u:hunter2@127.0.0.1:port"},
		{URL: "redis://127.0.0.1:6379", StreamPrefix: "a\x00"},
		{URL: "redis://127.0.0.1:6379", StreamPrefix: strings.Repeat("p", 257)},
		{URL: "redis://127.0.0.1:6379", TLSCAFile: "/ca.pem"},
		{URL: "redis://127.0.0.1:6379", MaxMessageBytes: 100},
		{URL: "redis://127.0.0.1:6379", Timeout: time.Millisecond},
	} {
		if s, err := redissink.New(c); err == nil {
			_ = s.Close()
			t.Errorf("New(%+v) succeeded", c)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}
