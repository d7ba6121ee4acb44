package webhook

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
)

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// Bounds of a secret's key, in bytes, as the Standard Webhooks
// specification recommends.
const (
	SecretMinBytes = 24
	SecretMaxBytes = 64
)

// Secret is a signing key. It prints, formats and logs as redacted, so that
// it cannot leak by accident.
type Secret struct{ key []byte }

// String returns a redacted placeholder.
func (Secret) String() string { return secretPrefix + "(redacted)" }

// GoString returns a redacted placeholder, for %#v.
func (Secret) GoString() string { return "webhook.Secret(redacted)" }

// LogValue keeps the key out of logs.
func (Secret) LogValue() slog.Value { return slog.StringValue(secretPrefix + "(redacted)") }

// ParseSecrets parses WEBHOOK_SECRET: one or more secrets "whsec_" + base64
// of 24 to 64 random bytes, separated by spaces or commas. Every secret signs
// each request; list the new one next to the old while receivers move over.
// Errors say which secret is wrong and why, never its text.
func ParseSecrets(s string) ([]Secret, error) {
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	if len(parts) == 0 {
		return nil, fmt.Errorf("no secret given; want one or more %s<base64> secrets separated by spaces or commas", secretPrefix)
	}
	secrets := make([]Secret, 0, len(parts))
	for i, p := range parts {
		which := fmt.Sprintf("secret %d of %d", i+1, len(parts))
		enc, ok := strings.CutPrefix(p, secretPrefix)
		if !ok {
			return nil, fmt.Errorf("%s does not start with %q", which, secretPrefix)
		}
		key, err := decodeBase64(enc)
		if err != nil {
			return nil, fmt.Errorf("%s: the part after %s is not base64", which, secretPrefix)
		}
		if len(key) < SecretMinBytes || len(key) > SecretMaxBytes {
			return nil, fmt.Errorf("%s decodes to %d bytes; want %d to %d", which, len(key), SecretMinBytes, SecretMaxBytes)
		}
		secrets = append(secrets, Secret{key: key})
	}
	return secrets, nil
}

// decodeBase64 reads standard base64, with or without padding.
func decodeBase64(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") {
		return base64.StdEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}
