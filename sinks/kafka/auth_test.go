package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/waitfor"
	"github.com/outbox-relay/outbox-relay/sinks"
	kafkasink "github.com/outbox-relay/outbox-relay/sinks/kafka"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

const (
	adminUser, adminPass = "admin", "admin-s3cret"
	relayUser, relayPass = "relay", "relay-s3cret"
)

// saslCluster starts a cluster that requires SASL, with a superuser the
// harness uses and the relay's user under each mechanism.
func saslCluster(t *testing.T, opts ...kfake.Opt) *kafkatest.Cluster {
	t.Helper()
	c := kafkatest.Start(t, append([]kfake.Opt{
		kfake.EnableSASL(),
		kfake.Superuser(kafkasink.MechanismScramSHA256, adminUser, adminPass),
		kfake.Superuser(kafkasink.MechanismPlain, relayUser, relayPass),
		kfake.Superuser(kafkasink.MechanismScramSHA256, relayUser, relayPass),
		kfake.Superuser(kafkasink.MechanismScramSHA512, relayUser, relayPass),
	}, opts...)...)
	c.SetClientOpts(kgo.SASL(scram.Auth{User: adminUser, Pass: adminPass}.AsSha256Mechanism()))
	c.CreateTopic(t, topic, 3)
	return c
}

func TestSASL_EachMechanismDelivers(t *testing.T) {
	t.Parallel()
	c := saslCluster(t)
	for _, mech := range kafkasink.Mechanisms {
		t.Run(mech, func(t *testing.T) {
			s := newSink(t, c, func(cfg *kafkasink.Config) {
				cfg.SASL = kafkasink.SASL{Mechanism: mech, Username: relayUser, Password: relayPass}
			})
			msgs := sinktest.Messages(t, 5)
			for i, err := range deliver(t, s, msgs) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			waitRecords(t, c, msgs)
		})
	}
}

func TestSASL_WrongPasswordIsRefusedClearlyAndNothingIsDelivered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// realKafka makes the cluster answer bad credentials as Apache
		// Kafka does, with SASL_AUTHENTICATION_FAILED, where kfake closes
		// the connection.
		realKafka bool
		mech      string
	}{
		{"PLAIN closed connection", false, kafkasink.MechanismPlain},
		{"SCRAM-SHA-512 closed connection", false, kafkasink.MechanismScramSHA512},
		{"PLAIN SASL_AUTHENTICATION_FAILED", true, kafkasink.MechanismPlain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := saslCluster(t)
			if tt.realKafka {
				answerWrongPasswordAsKafkaDoes(c.Fake(), "wrong-password")
			}
			log, logs := testlog.New(t, slog.LevelInfo)
			s, err := kafkasink.New(kafkasink.Config{
				Brokers:     c.Brokers(),
				TopicPrefix: prefix,
				SASL:        kafkasink.SASL{Mechanism: tt.mech, Username: relayUser, Password: "wrong-password"},
				Logger:      log,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			problems, err := s.CheckStartup(ctx)
			if err != nil {
				t.Fatalf("CheckStartup: %v", err)
			}
			if len(problems) != 1 || problems[0].Code != kafkasink.ProblemAuthFailed {
				t.Fatalf("CheckStartup found %+v, want %s", problems, kafkasink.ProblemAuthFailed)
			}
			avail := s.Available()
			t.Logf("Available: %v", avail)
			if !errors.Is(avail, sinks.ErrNotAttempted) || !strings.Contains(avail.Error(), "KAFKA_SASL_PASSWORD") {
				t.Errorf("Available = %v, want a not-attempted error that points at the credentials", avail)
			}
			msgs := sinktest.Messages(t, 3)
			for i, err := range deliver(t, s, msgs) {
				if !errors.Is(err, sinks.ErrNotAttempted) {
					t.Errorf("message %d: %v, want not attempted", i, err)
				}
			}
			if recs := c.Records(t, topic); len(recs) != 0 {
				t.Errorf("the topic holds %d records", len(recs))
			}
			_ = s.Close()
			if strings.Contains(logs.String(), "wrong-password") {
				t.Errorf("the log shows the password:\n%s", logs.String())
			}
			if !strings.Contains(logs.String(), "KAFKA_SASL_PASSWORD") {
				t.Errorf("the log does not say the credentials were refused:\n%s", logs.String())
			}
		})
	}
}

// answerWrongPasswordAsKafkaDoes makes c answer a PLAIN authentication with
// password as Apache Kafka answers bad credentials.
func answerWrongPasswordAsKafkaDoes(c *kfake.Cluster, password string) {
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		auth := req.(*kmsg.SASLAuthenticateRequest)
		if !bytes.HasSuffix(auth.SASLAuthBytes, []byte("\x00"+password)) {
			return nil, nil, false
		}
		resp := auth.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
}

func TestSASL_PasswordNeverPrints(t *testing.T) {
	cfg := kafkasink.Config{SASL: kafkasink.SASL{Mechanism: kafkasink.MechanismPlain, Username: relayUser, Password: relayPass}}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "sasl", cfg.SASL, "password", cfg.SASL.Password, "config", cfg)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "sasl", cfg.SASL, "password", cfg.SASL.Password, "config", cfg)
	for _, s := range []string{
		fmt.Sprint(cfg.SASL.Password), fmt.Sprintf("%v %+v %#v %s %q %x", cfg, cfg, cfg, cfg.SASL, cfg.SASL.Password, cfg.SASL.Password), logs.String(),
	} {
		if strings.Contains(s, relayPass) || strings.Contains(s, fmt.Sprintf("%x", relayPass)) {
			t.Errorf("%q shows the password", s)
		}
	}
}

func TestSASL_ConfigIsChecked(t *testing.T) {
	tests := []kafkasink.SASL{
		{Mechanism: "GSSAPI", Username: "u", Password: "p"},
		{Mechanism: kafkasink.MechanismPlain, Username: "u"},
		{Mechanism: kafkasink.MechanismScramSHA256, Password: "p"},
		{Username: "u", Password: "p"},
	}
	for _, tt := range tests {
		err := tt.Validate()
		if err == nil {
			t.Errorf("%+v: accepted", tt)
			continue
		}
		if strings.Contains(err.Error(), `"p"`) {
			t.Errorf("%+v: %v shows the password", tt, err)
		}
		if _, err := kafkasink.New(kafkasink.Config{Brokers: []string{"127.0.0.1:9092"}, SASL: tt}); err == nil {
			t.Errorf("New accepted SASL %+v", tt)
		}
	}
}

// waitRecords waits until c holds a record for each of msgs on topic,
// each with its payload and its idempotency key.
func waitRecords(t *testing.T, c *kafkatest.Cluster, msgs []sinks.Message) map[string][]*kgo.Record {
	t.Helper()
	var got map[string][]*kgo.Record
	waitfor.Condition(t, 15*time.Second, "the records in Kafka", func() bool {
		got = map[string][]*kgo.Record{}
		for _, r := range c.Records(t, topic) {
			k := header(r, kafkasink.IdempotencyKeyHeader)
			got[k] = append(got[k], r)
		}
		for _, m := range msgs {
			if len(got[m.IdempotencyKey]) == 0 {
				return false
			}
		}
		return true
	})
	for _, m := range msgs {
		if r := got[m.IdempotencyKey][0]; !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("%s: value %q, want %q", m.IdempotencyKey, r.Value, m.Payload)
		}
	}
	return got
}

func TestTLS_DeliversToABrokerItTrusts(t *testing.T) {
	t.Parallel()
	for _, mutual := range []bool{false, true} {
		t.Run(fmt.Sprintf("client certificate %v", mutual), func(t *testing.T) {
			t.Parallel()
			certs := kafkatest.NewTLS(t)
			if mutual {
				certs.RequireClientCert()
			}
			c := kafkatest.Start(t, kfake.TLS(certs.Server))
			clientTLS, err := kafkasink.TLS{Enabled: true, CAFile: certs.CAFile, CertFile: certs.CertFile, KeyFile: certs.KeyFile}.Config()
			if err != nil {
				t.Fatal(err)
			}
			c.SetClientOpts(kgo.DialTLSConfig(clientTLS))
			c.CreateTopic(t, topic, 1)
			s := newSink(t, c, func(cfg *kafkasink.Config) {
				cfg.TLS = kafkasink.TLS{Enabled: true, CAFile: certs.CAFile}
				if mutual {
					cfg.TLS.CertFile, cfg.TLS.KeyFile = certs.CertFile, certs.KeyFile
				}
			})
			msgs := sinktest.Messages(t, 3)
			for i, err := range deliver(t, s, msgs) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			waitRecords(t, c, msgs)
		})
	}
}

func TestTLS_UntrustedBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	certs := kafkatest.NewTLS(t)
	c := kafkatest.Start(t, kfake.TLS(certs.Server))
	s, err := kafkasink.New(kafkasink.Config{Brokers: c.Brokers(), TLS: kafkasink.TLS{Enabled: true}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitfor.Condition(t, 15*time.Second, "Available to explain the refused certificate", func() bool {
		err := s.Available()
		return err != nil && strings.Contains(err.Error(), "certificate")
	})
	for i, err := range deliver(t, s, sinktest.Messages(t, 2)) {
		if !errors.Is(err, sinks.ErrNotAttempted) {
			t.Errorf("message %d: %v, want not attempted", i, err)
		}
	}
}

func TestTLS_FilesAreChecked(t *testing.T) {
	certs := kafkatest.NewTLS(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		tls  kafkasink.TLS
		want string
	}{
		{"missing CA", kafkasink.TLS{Enabled: true, CAFile: missing}, "missing.pem"},
		{"CA not PEM", kafkasink.TLS{Enabled: true, CAFile: certs.KeyFile}, "no PEM certificate"},
		{"certificate without key", kafkasink.TLS{Enabled: true, CertFile: certs.CertFile}, "key"},
		{"key without certificate", kafkasink.TLS{Enabled: true, KeyFile: certs.KeyFile}, "certificate"},
		{"key that is no key", kafkasink.TLS{Enabled: true, CertFile: certs.CertFile, KeyFile: certs.CAFile}, "client certificate"},
		{"files without TLS", kafkasink.TLS{CAFile: certs.CAFile}, "TLS is off"},
	}
	for _, tt := range tests {
		_, err := tt.tls.Config()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tt.name, err, tt.want)
		}
	}
}
