package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// settingsBase enables every sink, so that every variable has something to
// reach. A client certificate is set for each, so that the sample of its
// certificate or of its key alone can change it. $SAMPLES, here and in
// the values below, is the directory where sampleFiles writes the files
// they name.
var settingsBase = []string{
	"DATABASE_URL=postgres://relay@127.0.0.1:5432/app",
	"NATS_URL=nats://127.0.0.1:4222",
	"NATS_TLS_CERT_FILE=$SAMPLES/client.pem",
	"NATS_TLS_KEY_FILE=$SAMPLES/client-key.pem",
	"WEBHOOK_URL=https://hooks.example.com/outbox",
	"WEBHOOK_SECRET=" + testSecret,
	"KAFKA_BROKERS=127.0.0.1:9092",
	"WEBHOOK_TLS_CERT_FILE=$SAMPLES/client.pem",
	"WEBHOOK_TLS_KEY_FILE=$SAMPLES/client-key.pem",
	"RABBITMQ_URL=amqp://relay:pass@127.0.0.1:5672/events",
	"PUBSUB_PROJECT=orders-prod-4711",
	"REDIS_URL=rediss://127.0.0.1:6380/0",
	"REDIS_TLS_CERT_FILE=$SAMPLES/client.pem",
	"REDIS_TLS_KEY_FILE=$SAMPLES/client-key.pem",
	"SQS_QUEUE_URL=https://sqs.eu-west-1.amazonaws.com/123456789012/",
	"SNS_TOPIC_ARN=arn:aws:sns:eu-west-1:123456789012:",
	"RELAY_SINK=nats",
	"OTEL_TRACES_EXPORTER=otlp",
}

// sampleValues holds, for every variable of the reference, a valid value
// other than its default (or than its settingsBase value). A variable
// missing here fails the test: give it one when you add it.
var sampleValues = map[string]string{
	"DATABASE_URL":                       "postgres://relay@db.internal:5432/other",
	"RELAY_SCHEMA":                       "events_outbox",
	"RELAY_MIGRATE":                      "false",
	"RELAY_SCHEMAS":                      "orders,billing",
	"RELAY_SCHEMA_MATCH":                 `tenant\_%`,
	"RELAY_SCHEMA_OWNERS":                "app_owner,tenants_admin",
	"RELAY_TENANTS_FILE":                 "$SAMPLES/tenants.yaml",
	"RELAY_DISCOVER_INTERVAL":            "20s",
	"RELAY_IDLE_POLL_INTERVAL":           "5s",
	"RELAY_READY_WHEN":                   "any",
	"RELAY_SINK":                         "webhook",
	"RELAY_ID":                           "relay-7",
	"RELAY_BATCH_SIZE":                   "250",
	"RELAY_MAX_IN_FLIGHT":                "9000",
	"RELAY_MAX_IN_FLIGHT_BYTES":          "16777216",
	"RELAY_MAX_PAYLOAD_BYTES":            "1048576",
	"RELAY_POLL_INTERVAL":                "200ms",
	"RELAY_LEASE":                        "45s",
	"RELAY_ORDERED":                      "true",
	"RELAY_MODE":                         "partitioned",
	"RELAY_NOTIFY":                       "true",
	"RELAY_MAX_ATTEMPTS":                 "7",
	"RELAY_BACKOFF_MIN":                  "2s",
	"RELAY_BACKOFF_MAX":                  "10m",
	"RELAY_DRAIN_TIMEOUT":                "3s",
	"RELAY_ARCHIVE_RETENTION":            "24h",
	"RELAY_DEDUP_RETENTION":              "0",
	"RELAY_HOT_ROTATION":                 "5m",
	"RELAY_CLOUDEVENTS_SOURCE":           "/orders",
	"RELAY_HTTP_ADDR":                    "127.0.0.1:9999",
	"RELAY_HTTP_MAX_CONNECTIONS":         "64",
	"RELAY_CONSOLE":                      "true",
	"RELAY_CONSOLE_SECRET":               "bWFkZSB1cCBmb3IgdGhlIHRlc3Q=",
	"NATS_URL":                           "nats://nats.internal:4222",
	"NATS_JETSTREAM":                     "false",
	"NATS_SUBJECT_PREFIX":                "events.",
	"NATS_STREAM":                        "EVENTS",
	"NATS_ACK_TIMEOUT":                   "2s",
	"NATS_CREDS_FILE":                    "$SAMPLES/user.creds",
	"NATS_NKEY_SEED_FILE":                "$SAMPLES/user.nk",
	"NATS_TLS_CA_FILE":                   "$SAMPLES/ca.pem",
	"NATS_TLS_CERT_FILE":                 "$SAMPLES/client-copy.pem",
	"NATS_TLS_KEY_FILE":                  "$SAMPLES/client-key-copy.pem",
	"WEBHOOK_URL":                        "https://other.example.com/hook",
	"WEBHOOK_SECRET":                     "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2Vj",
	"WEBHOOK_TIMEOUT":                    "3s",
	"WEBHOOK_CONCURRENCY":                "32",
	"WEBHOOK_MAX_RETRY_AFTER":            "5m",
	"KAFKA_BROKERS":                      "kafka-1:9092, kafka-2:9092",
	"KAFKA_TOPIC_PREFIX":                 "events.",
	"KAFKA_PRODUCE_TIMEOUT":              "4s",
	"KAFKA_MAX_MESSAGE_BYTES":            "2000000",
	"KAFKA_SASL_MECHANISM":               "SCRAM-SHA-512",
	"KAFKA_SASL_USERNAME":                "relay",
	"KAFKA_SASL_PASSWORD":                "s3cret",
	"KAFKA_TLS":                          "true",
	"KAFKA_TLS_CA_FILE":                  "testdata/kafka/ca.pem",
	"KAFKA_TLS_CERT_FILE":                "testdata/kafka/client.pem",
	"KAFKA_TLS_KEY_FILE":                 "testdata/kafka/client-key.pem",
	"WEBHOOK_TLS_CA_FILE":                "$SAMPLES/ca.pem",
	"WEBHOOK_TLS_CERT_FILE":              "$SAMPLES/client-copy.pem",
	"WEBHOOK_TLS_KEY_FILE":               "$SAMPLES/client-key-copy.pem",
	"RABBITMQ_URL":                       "amqps://relay:pass@rabbit.internal:5671/other",
	"RABBITMQ_EXCHANGE":                  "outbox.events",
	"RABBITMQ_CONFIRM_TIMEOUT":           "4s",
	"RABBITMQ_MAX_MESSAGE_BYTES":         "1048576",
	"WEBHOOK_MAX_BODY_BYTES":             "1048576",
	"RABBITMQ_TLS_CA_FILE":               "/etc/outbox-relay/rabbitmq-ca.pem",
	"RABBITMQ_TLS_CERT_FILE":             "/etc/outbox-relay/rabbitmq-client.pem",
	"RABBITMQ_TLS_KEY_FILE":              "/etc/outbox-relay/rabbitmq-client-key.pem",
	"PUBSUB_PROJECT":                     "billing-prod-0815",
	"PUBSUB_TOPIC":                       "all-events",
	"PUBSUB_TOPIC_PREFIX":                "events.",
	"PUBSUB_TIMEOUT":                     "4s",
	"PUBSUB_ENDPOINT":                    "europe-west1-pubsub.googleapis.com:443",
	"PUBSUB_EMULATOR_HOST":               "127.0.0.1:8085",
	"PUBSUB_CREDENTIALS":                 `{"type":"service_account","client_email":"relay@orders-prod-4711.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\\nsample\\n-----END PRIVATE KEY-----\\n"}`,
	"REDIS_URL":                          "rediss://redis.internal:6380/1",
	"REDIS_USERNAME":                     "relay",
	"REDIS_PASSWORD":                     "s3cret",
	"REDIS_STREAM_PREFIX":                "events:",
	"REDIS_MAXLEN":                       "100000",
	"REDIS_TIMEOUT":                      "4s",
	"REDIS_MAX_MESSAGE_BYTES":            "4194304",
	"REDIS_TLS_CA_FILE":                  "$SAMPLES/ca.pem",
	"REDIS_TLS_CERT_FILE":                "$SAMPLES/client-copy.pem",
	"REDIS_TLS_KEY_FILE":                 "$SAMPLES/client-key-copy.pem",
	"SQS_QUEUE_URL":                      "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
	"SQS_QUEUE_PREFIX":                   "events-",
	"SQS_REGION":                         "eu-central-1",
	"SQS_ENDPOINT":                       "https://vpce-0a1b2c3d.sqs.eu-west-1.vpce.amazonaws.com",
	"SQS_TIMEOUT":                        "4s",
	"SQS_FIFO_DEFAULT_GROUP":             "unkeyed",
	"SQS_FAIR_QUEUES":                    "true",
	"SNS_TOPIC_ARN":                      "arn:aws:sns:eu-west-1:123456789012:orders.fifo",
	"SNS_TOPIC_PREFIX":                   "events-",
	"SNS_REGION":                         "eu-central-1",
	"SNS_ENDPOINT":                       "https://vpce-0a1b2c3d.sns.eu-west-1.vpce.amazonaws.com",
	"SNS_TIMEOUT":                        "4s",
	"SNS_FIFO_DEFAULT_GROUP":             "unkeyed",
	"OTEL_TRACES_EXPORTER":               "none",
	"OTEL_EXPORTER_OTLP_ENDPOINT":        "https://collector.internal:4318",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.internal:4318/custom/traces",
	"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",
	"OTEL_EXPORTER_OTLP_HEADERS":         "api-key=s3cret,x-team=payments",
	"OTEL_SERVICE_NAME":                  "orders-relay",
	"OTEL_RESOURCE_ATTRIBUTES":           "deployment.environment.name=prod",
	"OTEL_TRACES_SAMPLER":                "always_off",
	"OTEL_TRACES_SAMPLER_ARG":            "0.25",
	"RELAY_TRACE_INJECT":                 "true",
	"LOG_LEVEL":                          "debug",
	"LOG_FORMAT":                         "text",
}

// needs lists what a sample value needs beside it to be valid.
var needs = map[string][]string{
	"RELAY_SCHEMA_OWNERS":     {`RELAY_SCHEMA_MATCH=tenant\_%`},
	"OTEL_TRACES_SAMPLER_ARG": {"OTEL_TRACES_SAMPLER=traceidratio"},
	"NATS_STREAM":             {"NATS_SUBJECT_PREFIX=events."},
	"KAFKA_SASL_MECHANISM":    {"KAFKA_SASL_USERNAME=relay", "KAFKA_SASL_PASSWORD=s3cret"},
	"KAFKA_SASL_USERNAME":     {"KAFKA_SASL_MECHANISM=PLAIN", "KAFKA_SASL_PASSWORD=s3cret"},
	"KAFKA_SASL_PASSWORD":     {"KAFKA_SASL_MECHANISM=PLAIN", "KAFKA_SASL_USERNAME=relay"},
	"KAFKA_TLS_CA_FILE":       {"KAFKA_TLS=true"},
	"KAFKA_TLS_CERT_FILE":     {"KAFKA_TLS=true", "KAFKA_TLS_KEY_FILE=testdata/kafka/client-key.pem"},
	"KAFKA_TLS_KEY_FILE":      {"KAFKA_TLS=true", "KAFKA_TLS_CERT_FILE=testdata/kafka/client.pem"},
	"RABBITMQ_TLS_CA_FILE":    {"RABBITMQ_URL=amqps://relay:pass@127.0.0.1:5671/events"},
	"RABBITMQ_TLS_CERT_FILE":  {"RABBITMQ_URL=amqps://relay:pass@127.0.0.1:5671/events", "RABBITMQ_TLS_KEY_FILE=/etc/outbox-relay/key.pem"},
	"RABBITMQ_TLS_KEY_FILE":   {"RABBITMQ_URL=amqps://relay:pass@127.0.0.1:5671/events", "RABBITMQ_TLS_CERT_FILE=/etc/outbox-relay/cert.pem"},
	"REDIS_USERNAME":          {"REDIS_PASSWORD=s3cret"},
}

// TestSettings_EveryVariableTakesEffect sets each variable of the reference
// in turn and checks that the settings the binary runs with change: a
// variable that is read, validated and documented but reaches nothing fails
// here.
// replaces lists the variables of settingsBase a variable cannot be set
// with.
var replaces = map[string][]string{
	"RELAY_TENANTS_FILE": {"DATABASE_URL"},
}

func TestSettings_EveryVariableTakesEffect(t *testing.T) {
	t.Parallel()
	samples := sampleFiles(t)
	base := mustSettings(t, withSamples(samples, settingsBase))
	for _, v := range envReference() {
		sample, ok := sampleValues[v.Name]
		if secret, isTwin := strings.CutSuffix(v.Name, fileSuffix); isTwin && isSecret(secret) {
			// The twin holds the path of a file with the secret's sample.
			path := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(path, []byte(sampleValues[secret]+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			environ := slices.DeleteFunc(withSamples(samples, settingsBase), func(kv string) bool { return strings.HasPrefix(kv, secret+"=") })
			environ = append(environ, withSamples(samples, needs[secret])...)
			if got := mustSettings(t, append(environ, v.Name+"="+path)); reflect.DeepEqual(got, base) {
				t.Errorf("%s changes nothing the binary runs with", v.Name)
			}
			continue
		}
		if !ok {
			t.Errorf("%s has no sample value in settings_test.go", v.Name)
			continue
		}
		environ := slices.DeleteFunc(slices.Clone(settingsBase), func(kv string) bool {
			return slices.ContainsFunc(replaces[v.Name], func(name string) bool { return strings.HasPrefix(kv, name+"=") })
		})
		environ = append(environ, needs[v.Name]...)
		environ = append(environ, v.Name+"="+sample)
		got := mustSettings(t, withSamples(samples, environ))
		if reflect.DeepEqual(got, base) {
			t.Errorf("%s=%s changes nothing the binary runs with", v.Name, sample)
		}
	}
}

func TestSettings_DefaultsMatchTheEngine(t *testing.T) {
	t.Parallel()
	s := mustSettings(t, []string{"DATABASE_URL=postgres://x@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222"})
	if s.Relay.DefaultSink != "nats" {
		t.Errorf("DefaultSink = %q, want the only sink", s.Relay.DefaultSink)
	}
	if s.Relay.ArchiveRetention != 168*time.Hour || s.Relay.Mode != outbox.ModeUnordered {
		t.Errorf("ArchiveRetention = %s, Mode = %v: want the documented defaults", s.Relay.ArchiveRetention, s.Relay.Mode)
	}
	if s.HTTPAddr == "" || !s.Migrate {
		t.Errorf("HTTPAddr %q, Migrate %v: want the defaults", s.HTTPAddr, s.Migrate)
	}
	hooks := mustSettings(t, []string{"DATABASE_URL=postgres://x@127.0.0.1/db", "WEBHOOK_URL=https://hooks.example.com/", "WEBHOOK_SECRET=" + testSecret})
	if got := hooks.Sinks["webhook"].(webhook.Config).Concurrency; got != 64 {
		t.Errorf("WEBHOOK_CONCURRENCY unset gives %d, want the measured default 64", got)
	}
	empty := mustSettings(t, []string{"DATABASE_URL=postgres://x@127.0.0.1/db", "NATS_URL=nats://127.0.0.1:4222", "RELAY_HTTP_ADDR="})
	if empty.HTTPAddr != "" {
		t.Errorf("RELAY_HTTP_ADDR= (empty) gives %q, want the endpoint disabled", empty.HTTPAddr)
	}
}

// sampleFiles writes the files the sample values name into a directory
// and returns it: a CA, a client certificate and its key (each twice, under
// two names), a creds file and an NKey seed.
func sampleFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	client := ca.Issue(t)
	_, seed := natstest.NKeyUser(t)
	for from, to := range map[string][]string{
		ca.CertFile:                      {"ca.pem"},
		client.CertFile:                  {"client.pem", "client-copy.pem"},
		client.KeyFile:                   {"client-key.pem", "client-key-copy.pem"},
		natstest.NewOperator(t).Creds(t): {"user.creds"},
		seed:                             {"user.nk"},
		tenantsSample(t):                 {"tenants.yaml"},
	} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range to {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// withSamples returns environ with $SAMPLES replaced by dir.
func withSamples(dir string, environ []string) []string {
	out := make([]string, len(environ))
	for i, kv := range environ {
		out[i] = strings.ReplaceAll(kv, "$SAMPLES", dir)
	}
	return out
}

func mustSettings(t *testing.T, environ []string) settings {
	t.Helper()
	c, err := loadConfig(environ)
	if err != nil {
		t.Fatalf("%v: %v", environ, err)
	}
	s := settingsOf(&c, "test")
	if s.Outboxes, err = outboxSettingsOf(&c, environ); err != nil {
		t.Fatalf("%v: %v", environ, err)
	}
	return s
}

// isSecret reports whether name is a secret variable (it has a _FILE twin).
func isSecret(name string) bool {
	for _, f := range configFields() {
		if f.name == name {
			return f.field.Tag.Get("redact") != ""
		}
	}
	return false
}

// tenantsSample writes a tenants file of two databases and returns its path.
func tenantsSample(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	body := `tenants:
  - name: acme
    database_url: postgres://relay@acme.internal:5432/app
    schemas: [outbox]
  - name: globex
    database_url: postgres://relay@globex.internal:5432/app
    schema_match: tenant\_%
    mode: ordered
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
