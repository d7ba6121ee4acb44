package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms the sink speaks.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the SASL mechanisms the sink speaks.
var Mechanisms = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}

// SASL is how the sink authenticates to the brokers. The zero value does
// not authenticate.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (KAFKA_SASL_MECHANISM); empty turns SASL off.
	Mechanism string
	// Username is the SASL user (KAFKA_SASL_USERNAME).
	Username string
	// Password is the user's password (KAFKA_SASL_PASSWORD). It prints and
	// logs as redacted.
	Password Password
}

// Password is a secret that prints, formats and logs as redacted, so that
// it cannot leak by accident.
type Password string

// String returns a redacted placeholder.
func (Password) String() string { return "(redacted)" }

// GoString returns a redacted placeholder, for %#v.
func (Password) GoString() string { return "kafka.Password(redacted)" }

// LogValue keeps the password out of logs.
func (Password) LogValue() slog.Value { return slog.StringValue("(redacted)") }

// MarshalText keeps the password out of JSON and every other text
// encoding.
func (Password) MarshalText() ([]byte, error) { return []byte("(redacted)"), nil }

// LogValue logs s with its password redacted.
func (s SASL) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mechanism", s.Mechanism), slog.String("username", s.Username), slog.Any("password", s.Password))
}

// Validate checks s without showing the password: a known mechanism, and
// a username and a password together with it.
func (s SASL) Validate() error {
	if s.Mechanism == "" {
		if s.Username != "" || s.Password != "" {
			return errors.New("a SASL username or password is set without a mechanism")
		}
		return nil
	}
	if !slices.Contains(Mechanisms, s.Mechanism) {
		return fmt.Errorf("unknown SASL mechanism %q; want %s", s.Mechanism, strings.Join(Mechanisms, ", "))
	}
	if s.Username == "" || s.Password == "" {
		return fmt.Errorf("SASL %s needs both a username and a password", s.Mechanism)
	}
	return nil
}

// mechanism returns the franz-go mechanism for s, nil when s is off.
func (s SASL) mechanism() sasl.Mechanism {
	switch s.Mechanism {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: string(s.Password)}.AsMechanism()
	case MechanismScramSHA256:
		return scram.Auth{User: s.Username, Pass: string(s.Password)}.AsSha256Mechanism()
	case MechanismScramSHA512:
		return scram.Auth{User: s.Username, Pass: string(s.Password)}.AsSha512Mechanism()
	}
	return nil
}

// TLS is how the sink secures its connections to the brokers. The zero
// value dials in plaintext.
type TLS struct {
	// Enabled dials every broker with TLS (KAFKA_TLS).
	Enabled bool
	// CAFile is a PEM file of the certificate authorities to trust
	// (KAFKA_TLS_CA_FILE); empty trusts the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (KAFKA_TLS_CERT_FILE,
	// KAFKA_TLS_KEY_FILE). Both or neither.
	CertFile string
	KeyFile  string
}

// Config loads the files and returns the TLS configuration: nil when TLS
// is off. Errors name the file and what is wrong with it, never its
// contents.
func (t TLS) Config() (*tls.Config, error) {
	if !t.Enabled {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
			return nil, errors.New("TLS files are set but TLS is off")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA file %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate %s and key %s: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, errors.New("a client certificate needs its key file too")
	case t.KeyFile != "":
		return nil, errors.New("a client key needs its certificate file too")
	}
	return cfg, nil
}
