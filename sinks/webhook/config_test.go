package webhook_test

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/testlog"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

func TestValidateURL(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://hooks.example.com/outbox", true},
		{"http://127.0.0.1:8080/hook?token=abc", true},
		{"HTTPS://hooks.example.com", true},
		{"https://user:pass@hooks.example.com/x", true},
		{"http://[::1]:8080/", true},
		{"", false},
		{"hooks.example.com/outbox", false},
		{"ftp://hooks.example.com", false},
		{"nats://127.0.0.1:4222", false},
		{"file:///etc/passwd", false},
		{"https://", false},
		{"https:///path", false},
		{"https:hooks.example.com", false},
		{"http://:8080/", false},
		{"https://user:p%zz@hooks.example.com", false},
		{"https://hooks.example.com/\x7f", false},
	}
	for _, tt := range tests {
		err := webhook.ValidateURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateURL(%q) = %v, want ok=%v", tt.url, err, tt.ok)
		}
		if err != nil && (strings.Contains(err.Error(), "p%zz") || strings.Contains(err.Error(), "example")) {
			t.Errorf("ValidateURL(%q) = %q repeats the URL", tt.url, err)
		}
	}
}

func TestParseSecrets(t *testing.T) {
	a, b := webhooktest.NewSecret(t), webhooktest.NewSecret(t)
	for _, in := range []string{a, " " + a + " ", a + " " + b, a + "," + b, a + ", " + b, a + "\n" + b, strings.TrimRight(a, "=")} {
		secrets, err := webhook.ParseSecrets(in)
		if err != nil {
			t.Errorf("ParseSecrets(%q): %v", in, err)
			continue
		}
		if want := 1 + strings.Count(strings.TrimSpace(in), "whsec_") - 1; len(secrets) != want {
			t.Errorf("ParseSecrets(%q): %d secrets, want %d", in, len(secrets), want)
		}
	}

	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	long := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))
	bad := []struct {
		in, want string
	}{
		{"", "no secret"},
		{" , ", "no secret"},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", `does not start with "whsec_"`},
		{a + " hunter2hunter2hunter2", `secret 2 of 2 does not start with "whsec_"`},
		{"whsec_not*base64!", "not base64"},
		{short, "decodes to 16 bytes; want 24 to 64"},
		{long, "decodes to 65 bytes"},
	}
	for _, tt := range bad {
		_, err := webhook.ParseSecrets(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSecrets(%q) = %v, want an error saying %q", tt.in, err, tt.want)
			continue
		}
		for _, part := range strings.FieldsFunc(tt.in, func(r rune) bool { return r == ' ' || r == ',' }) {
			if len(part) > 6 && strings.Contains(err.Error(), strings.TrimPrefix(part, "whsec_")) {
				t.Errorf("ParseSecrets error %q shows the secret", err)
			}
		}
	}
}

func TestSecret_PrintsRedacted(t *testing.T) {
	secret := webhooktest.NewSecret(t)
	secrets, err := webhook.ParseSecrets(secret)
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.Config{URL: "https://example.com", Secrets: secrets}
	log, logs := testlog.NewJSON(t, slog.LevelInfo)
	log.Info("config", "secret", secrets[0], "secrets", secrets)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	for _, s := range []string{
		fmt.Sprint(secrets[0]), fmt.Sprintf("%v %+v %#v %s %x %q", secrets, cfg, cfg, secrets[0], secrets[0], secrets[0]), logs.String(),
	} {
		if strings.Contains(s, strings.TrimPrefix(secret, "whsec_")) || strings.Contains(s, string(key)) || strings.Contains(s, fmt.Sprintf("%x", key)) {
			t.Errorf("%q shows the secret", s)
		}
	}
}

func TestNew_RefusesBadConfig(t *testing.T) {
	secrets, err := webhook.ParseSecrets(webhooktest.NewSecret(t))
	if err != nil {
		t.Fatal(err)
	}
	good := webhook.Config{URL: "https://hooks.example.com/x", Secrets: secrets}
	if _, err := webhook.New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	tests := []struct {
		name   string
		change func(*webhook.Config)
		want   string
	}{
		{"no URL", func(c *webhook.Config) { c.URL = "" }, "URL"},
		{"bad scheme", func(c *webhook.Config) { c.URL = "ftp://x" }, "URL"},
		{"no secret", func(c *webhook.Config) { c.Secrets = nil }, "Secrets"},
		{"zero secret", func(c *webhook.Config) { c.Secrets = []webhook.Secret{{}} }, "Secrets"},
		{"negative timeout", func(c *webhook.Config) { c.Timeout = -time.Second }, "Timeout"},
		{"negative concurrency", func(c *webhook.Config) { c.Concurrency = -1 }, "Concurrency"},
		{"huge concurrency", func(c *webhook.Config) { c.Concurrency = webhook.ConcurrencyMax + 1 }, "Concurrency"},
		{"negative max retry-after", func(c *webhook.Config) { c.MaxRetryAfter = -time.Second }, "MaxRetryAfter"},
	}
	for _, tt := range tests {
		cfg := good
		tt.change(&cfg)
		_, err := webhook.New(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
}
