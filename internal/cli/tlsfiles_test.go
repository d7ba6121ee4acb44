package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testkit/natstest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
)

// TestRun_RefusesUnusableSecurityFiles checks the credentials and TLS
// files before anything connects: the error names the variable at fault
// and never shows what a file holds.
func TestRun_RefusesUnusableSecurityFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("s3cr3t-file-content"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	ca := tlstest.NewCA(t)
	client, other := ca.Issue(t), ca.Issue(t)
	_, seed := natstest.NKeyUser(t)
	seedBytes, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	creds := natstest.NewOperator(t).Creds(t)
	webhook := []string{"NATS_URL=", "WEBHOOK_URL=https://example.com/x", "WEBHOOK_SECRET=" + testSecret}

	cases := []struct {
		env  []string
		want []string
	}{
		{[]string{"NATS_CREDS_FILE=" + missing}, []string{"NATS_CREDS_FILE", "no such file"}},
		{[]string{"NATS_CREDS_FILE=" + garbage}, []string{"NATS_CREDS_FILE", "no valid user JWT"}},
		{[]string{"NATS_CREDS_FILE=" + seed}, []string{"NATS_CREDS_FILE", "no valid user JWT"}},
		{[]string{"NATS_NKEY_SEED_FILE=" + garbage}, []string{"NATS_NKEY_SEED_FILE", "no user NKey seed"}},
		{[]string{"NATS_NKEY_SEED_FILE=" + dir}, []string{"NATS_NKEY_SEED_FILE", "is a directory"}},
		{[]string{"NATS_CREDS_FILE=" + creds, "NATS_NKEY_SEED_FILE=" + seed}, []string{"NATS_NKEY_SEED_FILE", "NATS_CREDS_FILE is set too"}},
		{[]string{"NATS_TLS_CA_FILE=" + garbage}, []string{"NATS_TLS_CA_FILE", "no PEM certificate"}},
		{[]string{"NATS_TLS_CA_FILE=" + client.KeyFile}, []string{"NATS_TLS_CA_FILE", "no PEM certificate"}},
		{[]string{"NATS_TLS_CERT_FILE=" + client.CertFile}, []string{"NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE is not set"}},
		{[]string{"NATS_TLS_KEY_FILE=" + client.KeyFile}, []string{"NATS_TLS_KEY_FILE", "NATS_TLS_CERT_FILE is not set"}},
		{[]string{"NATS_TLS_CERT_FILE=" + client.CertFile, "NATS_TLS_KEY_FILE=" + missing}, []string{"invalid NATS_TLS_KEY_FILE", "no such file"}},
		{[]string{"NATS_TLS_CERT_FILE=" + client.CertFile, "NATS_TLS_KEY_FILE=" + other.KeyFile}, []string{"invalid NATS_TLS_CERT_FILE", "does not match", "NATS_TLS_KEY_FILE"}},
		{[]string{"NATS_TLS_CERT_FILE=" + garbage, "NATS_TLS_KEY_FILE=" + client.KeyFile}, []string{"invalid NATS_TLS_CERT_FILE"}},
		{append([]string{"NATS_TLS_CA_FILE=" + ca.CertFile}, webhook...), []string{"NATS_TLS_CA_FILE", "set without NATS_URL"}},
		{append([]string{"NATS_CREDS_FILE=" + creds}, webhook...), []string{"NATS_CREDS_FILE", "set without NATS_URL"}},
		{[]string{"WEBHOOK_TLS_CA_FILE=" + ca.CertFile}, []string{"WEBHOOK_TLS_CA_FILE", "set without WEBHOOK_URL"}},
		{[]string{"NATS_URL=", "WEBHOOK_URL=http://example.com/x", "WEBHOOK_SECRET=" + testSecret, "WEBHOOK_TLS_CA_FILE=" + ca.CertFile}, []string{"WEBHOOK_TLS_CA_FILE", "not https://"}},
		{append([]string{"WEBHOOK_TLS_CA_FILE=" + garbage}, webhook...), []string{"WEBHOOK_TLS_CA_FILE", "no PEM certificate"}},
		{append([]string{"WEBHOOK_TLS_CERT_FILE=" + client.CertFile}, webhook...), []string{"WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE is not set"}},
		{append([]string{"WEBHOOK_TLS_CERT_FILE=" + client.CertFile, "WEBHOOK_TLS_KEY_FILE=" + other.KeyFile}, webhook...), []string{"invalid WEBHOOK_TLS_CERT_FILE", "does not match"}},
	}
	secrets := []string{"s3cr3t", strings.TrimSpace(string(seedBytes))}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(strings.Join(c.env, " "), dir, "…"), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := append(append([]string{}, base...), c.env...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if code := run(ctx, []string{"run"}, env, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", stderr.String(), w)
				}
			}
			for _, secret := range secrets {
				if strings.Contains(stderr.String(), secret) {
					t.Errorf("stderr shows what a file holds: %s", stderr.String())
				}
			}
		})
	}
}
