package nats_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	natssink "github.com/outbox-relay/outbox-relay/sinks/nats"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// recoveries returns the info lines that end an outage in which reason was
// logged (the server restarts around the refusal may add other reasons).
func recoveries(logs *testlog.Buffer, reason string) []string {
	return logs.Lines("level=INFO", reason, `after="`)
}

// assertOneRecoveryLine waits for the info line that says the sink is back
// and names the failure it ends, then checks there is exactly one. nats.go
// runs its reconnected callback on its own goroutine, so the connection can
// be usable a moment before the line is written.
func assertOneRecoveryLine(t *testing.T, logs *testlog.Buffer, reason string) {
	t.Helper()
	logs.Wait(t, 10*time.Second, "level=INFO", reason, `after="`)
	if got := recoveries(logs, reason); len(got) != 1 {
		t.Errorf("info lines on recovery: %q, want one naming the failure it ends", got)
	}
}

// secureSink opens a JetStream sink on srv with the authentication and TLS
// settings of auth, logging to the returned buffer (and to the test's
// output). It does not wait for the connection.
func secureSink(t *testing.T, srv *natstest.Server, auth natssink.Config) (*natssink.Sink, *testlog.Buffer) {
	t.Helper()
	cfg := auth
	cfg.URL = srv.URL()
	cfg.JetStream = true
	cfg.SubjectPrefix = prefix
	cfg.AckTimeout = 2 * time.Second
	var logs *testlog.Buffer
	cfg.Logger, logs = testlog.New(t, slog.LevelInfo)
	s, err := natssink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, logs
}

// securityCase is a server that requires some authentication or TLS, the
// settings that get through, and settings that do not, with the reason
// the server or the handshake gives.
type securityCase struct {
	name   string
	server func(*server.Options)
	client []nats.Option // the test's own client
	good   natssink.Config
	bad    []badSettings
}

type badSettings struct {
	name   string
	cfg    natssink.Config
	reason string
}

func securityCases(t *testing.T) []securityCase {
	ca := tlstest.NewCA(t)
	serverCert := ca.Issue(t, "127.0.0.1")
	clientCert := ca.Issue(t)
	otherCA := tlstest.NewCA(t)
	strangerCert := otherCA.Issue(t)
	nkeyPub, nkeySeed := natstest.NKeyUser(t)
	_, wrongSeed := natstest.NKeyUser(t)
	nkeyOpt, err := nats.NkeyOptionFromSeed(nkeySeed)
	if err != nil {
		t.Fatal(err)
	}
	op := natstest.NewOperator(t)
	stranger := natstest.NewOperator(t)

	return []securityCase{{
		name:   "NKey",
		server: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}} },
		client: []nats.Option{nkeyOpt},
		good:   natssink.Config{NKeySeedFile: nkeySeed},
		bad: []badSettings{
			{"NoCredentials", natssink.Config{}, "authorization violation"},
			{"WrongSeed", natssink.Config{NKeySeedFile: wrongSeed}, "authorization violation"},
		},
	}, {
		name:   "CredsJWT",
		server: op.Configure,
		client: []nats.Option{nats.UserCredentials(op.Creds(t))},
		good:   natssink.Config{CredsFile: op.Creds(t)},
		bad: []badSettings{
			{"NoCredentials", natssink.Config{}, "authorization violation"},
			{"AnotherOperatorsUser", natssink.Config{CredsFile: stranger.Creds(t)}, "authorization violation"},
		},
	}, {
		name:   "PlainServer",
		server: func(*server.Options) {},
		good:   natssink.Config{},
		bad: []badSettings{
			{"TLSRequired", natssink.Config{TLSCAFile: ca.CertFile}, "secure connection not available"},
		},
	}, {
		name: "PrivateCA",
		server: func(o *server.Options) {
			o.TLSConfig = ca.ServerConfig(serverCert, false)
			o.TLS = true
			o.TLSTimeout = 5
		},
		client: []nats.Option{nats.RootCAs(ca.CertFile)},
		good:   natssink.Config{TLSCAFile: ca.CertFile},
		bad: []badSettings{
			{"SystemRoots", natssink.Config{}, "x509: certificate signed by unknown authority"},
			{"AnotherCA", natssink.Config{TLSCAFile: otherCA.CertFile}, "x509: certificate signed by unknown authority"},
		},
	}, {
		name: "ClientCertificate",
		server: func(o *server.Options) {
			o.TLSConfig = ca.ServerConfig(serverCert, true)
			o.TLS = true
			o.TLSVerify = true
			o.TLSTimeout = 5
		},
		client: []nats.Option{nats.RootCAs(ca.CertFile), nats.ClientCert(clientCert.CertFile, clientCert.KeyFile)},
		good:   natssink.Config{TLSCAFile: ca.CertFile, TLSCertFile: clientCert.CertFile, TLSKeyFile: clientCert.KeyFile},
		bad: []badSettings{
			{"NoClientCertificate", natssink.Config{TLSCAFile: ca.CertFile}, "remote error: tls: certificate required"},
			{"CertificateOfAnotherCA", natssink.Config{TLSCAFile: ca.CertFile, TLSCertFile: strangerCert.CertFile, TLSKeyFile: strangerCert.KeyFile}, "remote error: tls: "},
		},
	}}
}

// TestSink_AuthenticationAndTLS runs a server for each way of securing
// NATS: the right settings deliver; wrong ones deliver nothing, Available
// gives the server's (or the handshake's) reason, and that reason is logged
// at error level once, however many times the client tries again.
func TestSink_AuthenticationAndTLS(t *testing.T) {
	for _, c := range securityCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			t.Run("Delivers", func(t *testing.T) {
				t.Parallel()
				srv := natstest.Start(t, c.server)
				srv.SetClientOptions(c.client...)
				srv.CreateStream(t, stream, prefix+">")
				s, logs := secureSink(t, srv, c.good)
				waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
				msgs := sinktest.Messages(t, 3)
				for i, err := range deliver(t, s, msgs) {
					if err != nil {
						t.Errorf("message %d: %v", i, err)
					}
				}
				if n := srv.Count(t, stream); n != uint64(len(msgs)) {
					t.Errorf("the stream holds %d messages, want %d", n, len(msgs))
				}
				if errs := logs.Lines("level=ERROR"); len(errs) != 0 {
					t.Errorf("errors logged with the right settings: %q", errs)
				}
			})
			for _, b := range c.bad {
				t.Run(b.name, func(t *testing.T) {
					t.Parallel()
					srv := natstest.Start(t, c.server)
					srv.SetClientOptions(c.client...)
					srv.CreateStream(t, stream, prefix+">")
					before := srv.TotalConnections()
					s, logs := secureSink(t, srv, b.cfg)
					waitfor.Condition(t, 30*time.Second, "Available to give the reason", func() bool {
						err := s.Available()
						return err != nil && strings.Contains(err.Error(), b.reason)
					})
					err := s.Available()
					if !errors.Is(err, sinks.ErrNotAttempted) || !strings.Contains(err.Error(), "not connected to NATS: ") {
						t.Errorf("Available: %v, want not connected to NATS: <reason>, wrapping sinks.ErrNotAttempted", err)
					}
					// Several more attempts, each refused for the same reason.
					waitfor.Condition(t, 30*time.Second, "the client to try again several times", func() bool {
						return srv.TotalConnections() >= before+4
					})
					for i, err := range deliver(t, s, sinktest.Messages(t, 3)) {
						if err == nil || sinks.IsPermanent(err) || !errors.Is(err, sinks.ErrNotAttempted) {
							t.Errorf("message %d: %v, want not attempted", i, err)
						}
					}
					if n := srv.Count(t, stream); n != 0 {
						t.Errorf("the stream holds %d messages", n)
					}
					if got := logs.Lines("level=ERROR", b.reason); len(got) != 1 {
						t.Errorf("%d error lines with %q after %d attempts, want 1:\n%s", len(got), b.reason, srv.TotalConnections()-before, logs)
					}
				})
			}
		})
	}
}

// TestSink_RenewedCredsFileIsUsedAtTheNextAttempt replaces a refused creds
// file with a good one: the sink connects without a restart, says so at
// info with the failure it ends, and delivers.
func TestSink_RenewedCredsFileIsUsedAtTheNextAttempt(t *testing.T) {
	t.Parallel()
	op := natstest.NewOperator(t)
	srv := natstest.Start(t, op.Configure)
	srv.SetClientOptions(nats.UserCredentials(op.Creds(t)))
	srv.CreateStream(t, stream, prefix+">")

	creds := filepath.Join(t.TempDir(), "relay.creds")
	copyFile(t, natstest.NewOperator(t).Creds(t), creds) // a stranger's
	s, logs := secureSink(t, srv, natssink.Config{CredsFile: creds})
	waitfor.Condition(t, 30*time.Second, "the refusal", func() bool {
		err := s.Available()
		return err != nil && strings.Contains(err.Error(), "authorization violation")
	})

	copyFile(t, op.Creds(t), creds)
	waitfor.Condition(t, 30*time.Second, "the sink to connect with the renewed file", func() bool { return s.Available() == nil })
	assertOneRecoveryLine(t, logs, "authorization violation")
	for i, err := range deliver(t, s, sinktest.Messages(t, 2)) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got := logs.Lines("level=ERROR", "authorization violation"); len(got) != 1 {
		t.Errorf("error lines: %q, want 1", got)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// Write and rename, as a secret mounted in Kubernetes is swapped.
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// TestNew_RefusesUnusableFiles checks every file before connecting: the
// error names the field and never shows what the file holds.
func TestNew_RefusesUnusableFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	_, seedFile := natstest.NKeyUser(t)
	seedBytes, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(string(seedBytes))
	ca := tlstest.NewCA(t)
	client := ca.Issue(t)
	other := ca.Issue(t)
	creds := natstest.NewOperator(t).Creds(t)
	credsBytes, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	userJWT, err := nkeys.ParseDecoratedJWT(credsBytes)
	if err != nil {
		t.Fatal(err)
	}
	credsKey, err := nkeys.ParseDecoratedUserNKey(credsBytes)
	if err != nil {
		t.Fatal(err)
	}
	credsSeed, err := credsKey.Seed()
	if err != nil {
		t.Fatal(err)
	}
	// A creds file whose seed is another user's.
	mixed := write("mixed.creds", strings.Replace(string(credsBytes), string(credsSeed), seed, 1))
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accountSeed, err := account.Seed()
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name string
		cfg  natssink.Config
		want []string
	}{
		{"CredsMissing", natssink.Config{CredsFile: missing}, []string{"CredsFile", "no such file"}},
		{"CredsIsASeed", natssink.Config{CredsFile: seedFile}, []string{"CredsFile", "no valid user JWT"}},
		{"CredsOfAnotherSeed", natssink.Config{CredsFile: mixed}, []string{"CredsFile", "not the user JWT's"}},
		{"CredsGarbage", natssink.Config{CredsFile: write("garbage.creds", "hunter2-not-a-creds-file")}, []string{"CredsFile"}},
		{"SeedMissing", natssink.Config{NKeySeedFile: missing}, []string{"NKeySeedFile", "no such file"}},
		{"SeedGarbage", natssink.Config{NKeySeedFile: write("garbage.nk", "hunter2")}, []string{"NKeySeedFile", "no user NKey seed"}},
		{"SeedIsAnAccountSeed", natssink.Config{NKeySeedFile: write("account.nk", string(accountSeed))}, []string{"NKeySeedFile", "user seed"}},
		{"CredsAndSeed", natssink.Config{CredsFile: creds, NKeySeedFile: seedFile}, []string{"CredsFile and NKeySeedFile"}},
		{"CAMissing", natssink.Config{TLSCAFile: missing}, []string{"TLSCAFile", "no such file"}},
		{"CAWithoutCertificates", natssink.Config{TLSCAFile: write("ca.pem", "hunter2")}, []string{"TLSCAFile", "no PEM certificate"}},
		{"CAIsAKey", natssink.Config{TLSCAFile: client.KeyFile}, []string{"TLSCAFile", "no PEM certificate"}},
		{"CertWithoutKey", natssink.Config{TLSCertFile: client.CertFile}, []string{"TLSCertFile and TLSKeyFile"}},
		{"KeyWithoutCert", natssink.Config{TLSKeyFile: client.KeyFile}, []string{"TLSCertFile and TLSKeyFile"}},
		{"KeyOfAnotherCert", natssink.Config{TLSCertFile: client.CertFile, TLSKeyFile: other.KeyFile}, []string{"TLSCertFile", "does not match"}},
		{"KeyMissing", natssink.Config{TLSCertFile: client.CertFile, TLSKeyFile: missing}, []string{"TLSKeyFile", "no such file"}},
	}
	secrets := []string{seed, "hunter2", string(credsSeed), string(accountSeed), userJWT}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL = "nats://127.0.0.1:1"
			s, err := natssink.New(cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted the files")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, secret := range secrets {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows what a file holds", err)
				}
			}
		})
	}
}

// TestSink_RefusedAtReconnection restarts the server without the relay's
// user: every reconnection is refused, which is logged once and shown by
// Available; when the user is back the sink reconnects and delivers.
func TestSink_RefusedAtReconnection(t *testing.T) {
	t.Parallel()
	relayPub, relaySeed := natstest.NKeyUser(t)
	testPub, testSeed := natstest.NKeyUser(t)
	testOpt, err := nats.NkeyOptionFromSeed(testSeed)
	if err != nil {
		t.Fatal(err)
	}
	users := func(pubs ...string) func(*server.Options) {
		return func(o *server.Options) {
			o.Nkeys = nil
			for _, p := range pubs {
				o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: p})
			}
		}
	}
	srv := natstest.Start(t, users(relayPub, testPub))
	srv.SetClientOptions(testOpt)
	srv.CreateStream(t, stream, prefix+">")
	s, logs := secureSink(t, srv, natssink.Config{NKeySeedFile: relaySeed})
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })

	srv.RestartWith(users(testPub))
	before := srv.TotalConnections()
	waitfor.Condition(t, 30*time.Second, "Available to give the refusal", func() bool {
		err := s.Available()
		return err != nil && strings.Contains(err.Error(), "not connected to NATS: authorization violation")
	})
	// The test's own client reconnects once; the sink tries again and again.
	waitfor.Condition(t, 30*time.Second, "the client to try again several times", func() bool {
		return srv.TotalConnections() >= before+5
	})
	if got := logs.Lines("level=ERROR", "authorization violation"); len(got) != 1 {
		t.Errorf("%d error lines for %d refused reconnections, want 1:\n%s", len(got), srv.TotalConnections()-before, logs)
	}

	srv.RestartWith(users(relayPub, testPub))
	waitfor.Condition(t, 30*time.Second, "the sink to reconnect", func() bool { return s.Available() == nil })
	assertOneRecoveryLine(t, logs, "authorization violation")
	waitfor.Condition(t, 15*time.Second, "deliveries to succeed after the restart", func() bool {
		for _, err := range deliver(t, s, sinktest.Messages(t, 1)) {
			if err != nil {
				return false
			}
		}
		return true
	})
}

// TestSink_PublishWithoutPermissionIsLoudAndTransient publishes to a
// subject the user may not publish to: the message is retried (no ack
// comes), and the server's refusal is logged at error level once.
func TestSink_PublishWithoutPermissionIsLoudAndTransient(t *testing.T) {
	t.Parallel()
	relayPub, relaySeed := natstest.NKeyUser(t)
	testPub, testSeed := natstest.NKeyUser(t)
	testOpt, err := nats.NkeyOptionFromSeed(testSeed)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{
			{Nkey: relayPub, Permissions: &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{prefix + "denied"}}}},
			{Nkey: testPub},
		}
	})
	srv.SetClientOptions(testOpt)
	srv.CreateStream(t, stream, prefix+">")
	s, logs := secureSink(t, srv, natssink.Config{NKeySeedFile: relaySeed})
	waitfor.Condition(t, 15*time.Second, "the sink to connect", func() bool { return s.Available() == nil })
	msgs := sinktest.Messages(t, 2)
	msgs[0].Topic = "denied"
	for attempt := 1; attempt <= 2; attempt++ {
		errs := deliver(t, s, msgs)
		if errs[0] == nil || sinks.IsPermanent(errs[0]) {
			t.Errorf("attempt %d: the denied message: %v, want a transient error", attempt, errs[0])
		}
		if errs[1] != nil {
			t.Errorf("attempt %d: the allowed message: %v", attempt, errs[1])
		}
	}
	if err := s.Available(); err != nil {
		t.Errorf("Available: %v; a denied subject does not make the sink unavailable", err)
	}
	logs.Wait(t, 15*time.Second, "level=ERROR", "permissions violation")
	if got := logs.Lines("level=ERROR", "permissions violation"); len(got) != 1 {
		t.Errorf("error lines: %q, want 1", got)
	}
}
