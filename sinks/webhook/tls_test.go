package webhook_test

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// tlsSink returns a sink posting to e with the TLS files of files, logging
// to the returned buffer (and to the test's output).
func tlsSink(t *testing.T, e *webhooktest.Receiver, files webhook.Config) (*webhook.Sink, *testlog.Buffer) {
	t.Helper()
	log, logs := testlog.New(t, slog.LevelInfo)
	return newSink(t, e, func(c *webhook.Config) {
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = files.TLSCAFile, files.TLSCertFile, files.TLSKeyFile
		c.Concurrency = 1
		c.Logger = log
	}), logs
}

func TestSink_TLSWithAPrivateCA(t *testing.T) {
	ca := tlstest.NewCA(t)
	serverCert := ca.Issue(t, "127.0.0.1")
	clientCert := ca.Issue(t)
	otherCA := tlstest.NewCA(t)

	t.Run("Delivers", func(t *testing.T) {
		t.Parallel()
		e := webhooktest.NewTLSReceiver(t, ca.ServerConfig(serverCert, false))
		s, logs := tlsSink(t, e, webhook.Config{TLSCAFile: ca.CertFile})
		for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
			if err != nil {
				t.Errorf("message %d: %v", i, err)
			}
		}
		if n := len(e.Accepted()); n != 3 {
			t.Errorf("the endpoint accepted %d messages, want 3", n)
		}
		if got := logs.Lines("level=ERROR"); len(got) != 0 {
			t.Errorf("errors logged: %q", got)
		}
	})
	t.Run("DeliversWithAClientCertificate", func(t *testing.T) {
		t.Parallel()
		e := webhooktest.NewTLSReceiver(t, ca.ServerConfig(serverCert, true))
		s, _ := tlsSink(t, e, webhook.Config{TLSCAFile: ca.CertFile, TLSCertFile: clientCert.CertFile, TLSKeyFile: clientCert.KeyFile})
		for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
			if err != nil {
				t.Errorf("message %d: %v", i, err)
			}
		}
		if n := len(e.Accepted()); n != 3 {
			t.Errorf("the endpoint accepted %d messages, want 3", n)
		}
	})

	for _, tt := range []struct {
		name          string
		requireClient bool
		files         webhook.Config
		reason        string
	}{
		{"SystemRoots", false, webhook.Config{}, "x509: certificate signed by unknown authority"},
		{"AnotherCA", false, webhook.Config{TLSCAFile: otherCA.CertFile}, "x509: certificate signed by unknown authority"},
		{"NoClientCertificate", true, webhook.Config{TLSCAFile: ca.CertFile}, "tls: certificate required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := webhooktest.NewTLSReceiver(t, ca.ServerConfig(serverCert, tt.requireClient))
			s, logs := tlsSink(t, e, tt.files)
			assertTLSFailure(t, s, logs, tt.reason)
			if n := len(e.Requests()); n != 0 {
				t.Errorf("%d requests reached the endpoint", n)
			}
		})
	}
}

// assertTLSFailure delivers until the circuit breaker opens and once more
// after its pause: every message fails as transient (never permanent: a
// certificate that does not verify is no reason to dead-letter a row), the
// breaker's pause names the TLS error, and the error is logged once.
func assertTLSFailure(t *testing.T, s *webhook.Sink, logs *testlog.Buffer, reason string) {
	t.Helper()
	errs := deliver(t, s, sinktest.Messages(t, 8))
	for i, err := range errs {
		switch {
		case err == nil:
			t.Fatalf("message %d delivered", i)
		case sinks.IsPermanent(err):
			t.Errorf("message %d: %v, want a transient error", i, err)
		case i < 5 && (errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "TLS handshake failed: ")):
			t.Errorf("message %d: %v, want a failed TLS handshake", i, err)
		case i >= 5 && !errors.Is(err, sinks.ErrNotAttempted):
			t.Errorf("message %d: %v, want not attempted once the breaker is open", i, err)
		}
	}
	if err := s.Available(); !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "circuit breaker") || !strings.Contains(err.Error(), reason) {
		t.Errorf("Available: %v, want the breaker open, naming %q", err, reason)
	}
	waitfor.Condition(t, 15*time.Second, "the breaker's pause to end", func() bool { return s.Available() == nil })
	if err := deliverOne(t, s, message(t, nil)); err == nil || sinks.IsPermanent(err) || !strings.Contains(err.Error(), reason) {
		t.Errorf("after the pause: %v, want the same transient failure", err)
	}
	if got := logs.Lines("level=ERROR", reason); len(got) != 1 {
		t.Errorf("%d error lines with %q after 6 failed handshakes, want 1:\n%s", len(got), reason, logs)
	}
}

// TestSink_TLSRecoveryIsLogged makes an endpoint refuse the sink's
// handshakes (it requires a client certificate the sink does not have),
// then accept them: the failure is logged once at error, the recovery at
// info, and messages flow again.
func TestSink_TLSRecoveryIsLogged(t *testing.T) {
	ca := tlstest.NewCA(t)
	strict := ca.ServerConfig(ca.Issue(t, "127.0.0.1"), true)
	lenient := strict.Clone()
	lenient.ClientAuth = tls.NoClientCert
	var requireClientCert atomic.Bool
	requireClientCert.Store(true)
	e := webhooktest.NewTLSReceiver(t, &tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			if requireClientCert.Load() {
				return strict, nil
			}
			return lenient, nil
		},
	})
	s, logs := tlsSink(t, e, webhook.Config{TLSCAFile: ca.CertFile})
	for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
		if err == nil || sinks.IsPermanent(err) {
			t.Errorf("message %d: %v, want a transient error", i, err)
		}
	}
	requireClientCert.Store(false)
	if err := deliverOne(t, s, message(t, nil)); err != nil {
		t.Fatalf("once the endpoint accepts the handshake: %v", err)
	}
	if got := logs.Lines("level=ERROR", "certificate required"); len(got) != 1 {
		t.Errorf("error lines: %q, want 1", got)
	}
	if got := logs.Lines("level=INFO", "certificate required"); len(got) != 1 || !strings.Contains(got[0], "succeed again") {
		t.Errorf("info lines: %q, want the recovery, naming the failure it ends", got)
	}
}

func TestNew_RefusesUnusableTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("hunter2"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t)
	client, other := ca.Issue(t), ca.Issue(t)
	key, err := os.ReadFile(client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	secret, err := webhook.ParseSecrets(webhooktest.NewSecret(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  webhook.Config
		want []string
	}{
		{"CAMissing", webhook.Config{TLSCAFile: missing}, []string{"TLSCAFile", "no such file"}},
		{"CAGarbage", webhook.Config{TLSCAFile: garbage}, []string{"TLSCAFile", "no PEM certificate"}},
		{"CAIsAKey", webhook.Config{TLSCAFile: client.KeyFile}, []string{"TLSCAFile", "no PEM certificate"}},
		{"CertWithoutKey", webhook.Config{TLSCertFile: client.CertFile}, []string{"TLSCertFile and TLSKeyFile"}},
		{"KeyWithoutCert", webhook.Config{TLSKeyFile: client.KeyFile}, []string{"TLSCertFile and TLSKeyFile"}},
		{"KeyOfAnotherCert", webhook.Config{TLSCertFile: client.CertFile, TLSKeyFile: other.KeyFile}, []string{"TLSCertFile", "does not match"}},
		{"KeyGarbage", webhook.Config{TLSCertFile: client.CertFile, TLSKeyFile: garbage}, []string{"TLSCertFile"}},
		{"KeyMissing", webhook.Config{TLSCertFile: client.CertFile, TLSKeyFile: missing}, []string{"key file", "no such file"}},
		{"PlainHTTP", webhook.Config{URL: "http://127.0.0.1:1/hook", TLSCAFile: ca.CertFile}, []string{"https://"}},
		{"WithATransport", webhook.Config{TLSCAFile: ca.CertFile, Transport: http.DefaultTransport}, []string{"Transport"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.URL == "" {
				cfg.URL = "https://127.0.0.1:1/hook"
			}
			cfg.Secrets = secret
			s, err := webhook.New(cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted the TLS settings")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), strings.TrimSpace(string(key))[30:60]) {
				t.Errorf("error %q shows what a file holds", err)
			}
		})
	}
}
