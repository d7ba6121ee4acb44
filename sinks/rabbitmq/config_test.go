package rabbitmq_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
)

func TestNew_RefusesWhatItCanNeverUse(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		cfg  rabbitmq.Config
		want string
	}{
		{"scheme", rabbitmq.Config{URL: "http://guest:hunter2@127.0.0.1:5672/"}, "not a valid AMQP URI"},
		{"unparsable", rabbitmq.Config{URL: "amqp://guest:hunter2@[::1"}, "not a valid AMQP URI"},
		{"exchange", rabbitmq.Config{URL: "amqp://127.0.0.1/", Exchange: "bad exchange"}, "exchange"},
		{"TLS on amqp", rabbitmq.Config{URL: "amqp://127.0.0.1/", TLSCAFile: missing}, "not amqps"},
		{"CA file", rabbitmq.Config{URL: "amqps://127.0.0.1/", TLSCAFile: missing}, "CA file"},
		{"cert without key", rabbitmq.Config{URL: "amqps://127.0.0.1/", TLSCertFile: missing}, "both"},
		{"cert file", rabbitmq.Config{URL: "amqps://127.0.0.1/", TLSCertFile: missing, TLSKeyFile: missing}, "client certificate"},
	}
	for _, tt := range tests {
		s, err := rabbitmq.New(tt.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: New accepted %+v", tt.name, tt.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want it to say %q", tt.name, err, tt.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v shows the password", tt.name, err)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"amqp://127.0.0.1:5672/", "amqp://127.0.0.1:5672/"},
		{"amqp://relay:s3cret@rabbit:5672/events", "amqp://relay@rabbit:5672/events"},
		{"amqps://relay:s3cret@rabbit/%2F?heartbeat=5", "amqps://relay@rabbit/%2F?heartbeat=5"},
		{"amqp://s3cret@rabbit/", "amqp://s3cret@rabbit/"}, // a user name alone is not a secret
		{"amqp://relay:s3cret@rab%zzbit/", "(unparsable URL)"},
		{"amqp://relay:s3cret%@rabbit/", "(unparsable URL)"},
	}
	for _, tt := range tests {
		got := rabbitmq.Redact(tt.in)
		if got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(tt.in, ":s3cret@") && strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q shows the password", tt.in, got)
		}
	}
}

func TestValidateExchange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"amq.topic", true},
		{"outbox.events", true},
		{"orders_v2:created-events", true},
		{strings.Repeat("e", 255), true},
		{"", false},
		{strings.Repeat("e", 256), false},
		{"with space", false},
		{"slash/name", false},
		{"événements", false},
		{"tab\tname", false},
	}
	for _, tt := range tests {
		if err := rabbitmq.ValidateExchange(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateExchange(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}
