package pubsub

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// ValidateCredentials checks that b is a service account key, as Google's
// console and gcloud write it: JSON with type service_account, a
// client_email and a private_key. Only that type is taken (Google warns
// against loading other credential types from configuration: an
// external_account file names files and URLs it reads); workload identity
// and other credentials come through the application default credentials.
// What the key holds is never repeated.
func ValidateCredentials(b []byte) error {
	var key struct {
		Type        string `json:"type"`
		ClientEmail string `json:"client_email"`
		PrivateKey  string `json:"private_key"`
	}
	if err := json.Unmarshal(b, &key); err != nil {
		return errors.New("the credentials are not a JSON service account key")
	}
	switch {
	case key.Type != "service_account":
		return fmt.Errorf("the credentials are of type %q, not a service account key (service_account); use the application default credentials for the others", clip(key.Type))
	case key.ClientEmail == "" || key.PrivateKey == "":
		return errors.New("the service account key has no client_email or private_key")
	}
	return nil
}

// Credentials is a service account key (JSON) that prints, logs and
// encodes as a placeholder, never as what it holds.
type Credentials []byte

// String returns a redacted placeholder.
func (Credentials) String() string { return "(redacted)" }

// GoString returns a redacted placeholder, for %#v.
func (Credentials) GoString() string { return "pubsub.Credentials(redacted)" }

// LogValue keeps the key out of logs.
func (Credentials) LogValue() slog.Value { return slog.StringValue("(redacted)") }

// MarshalText keeps the key out of JSON and every other text encoding.
func (Credentials) MarshalText() ([]byte, error) { return []byte("(redacted)"), nil }
