package nats

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Authentication and TLS: the files of Config become nats.Connect options.
// Each file is checked before connecting; the client then reads the creds
// file, the CA file and the client certificate again at every connection
// attempt (so that renewed files are used from the next reconnection), and
// the NKey seed file whenever it signs the server's challenge.

// errTLSFiles marks a TLS file that could not be read at a connection
// attempt: a setup problem, logged as loudly as a failed handshake.
var errTLSFiles = errors.New("TLS files")

// securityOptions returns the options that authenticate the connection and
// set up TLS from c's files, after checking them. Its errors name the
// field; they never show what a file holds.
func (c Config) securityOptions() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.CredsFile != "" && c.NKeySeedFile != "":
		return nil, errors.New("CredsFile and NKeySeedFile are both set; authenticate with one of them")
	case c.CredsFile != "":
		if err := CheckCredsFile(c.CredsFile); err != nil {
			return nil, fmt.Errorf("CredsFile: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.NKeySeedFile != "":
		if err := CheckNKeySeedFile(c.NKeySeedFile); err != nil {
			return nil, fmt.Errorf("NKeySeedFile: %w", err)
		}
		opt, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("NKeySeedFile: %w", err)
		}
		opts = append(opts, opt)
	}

	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return nil, errors.New("TLSCertFile and TLSKeyFile go together: set both or neither")
	}
	var certCB nats.TLSCertHandler
	var rootCAsCB nats.RootCAsHandler
	if c.TLSCAFile != "" {
		if _, err := sinks.LoadCAFile(c.TLSCAFile); err != nil {
			return nil, fmt.Errorf("TLSCAFile: %w", err)
		}
		rootCAsCB = func() (*x509.CertPool, error) {
			pool, err := sinks.LoadCAFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errTLSFiles, err)
			}
			return pool, nil
		}
	}
	if c.TLSCertFile != "" {
		if _, err := sinks.LoadClientCert(c.TLSCertFile, c.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("TLSCertFile, TLSKeyFile: %w", err)
		}
		certCB = func() (tls.Certificate, error) {
			cert, err := sinks.LoadClientCert(c.TLSCertFile, c.TLSKeyFile)
			if err != nil {
				return tls.Certificate{}, fmt.Errorf("%w: %w", errTLSFiles, err)
			}
			return cert, nil
		}
	}
	if certCB != nil || rootCAsCB != nil {
		// Requires TLS, at least 1.2, verifying the server against the
		// CA file (only those CAs) or the system roots.
		opts = append(opts, nats.ClientTLSConfig(certCB, rootCAsCB))
	}
	return opts, nil
}

// CheckCredsFile reports whether path can be read and holds NATS user
// credentials as nsc writes them: a user JWT and the NKey seed of that
// user. Its errors never show what the file holds.
func CheckCredsFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the creds file: %w", err)
	}
	defer wipe(b)
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return errors.New("no user JWT found; want a .creds file holding a user JWT and its NKey seed")
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		// The decoder's message may quote the file: leave it out.
		return errors.New("no valid user JWT found; want a .creds file holding a user JWT and its NKey seed")
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("no user NKey seed found: %w", err)
	}
	defer kp.Wipe()
	public, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("the NKey seed: %w", err)
	}
	if public != claims.Subject {
		return errors.New("the NKey seed is not the user JWT's: the server would refuse the connection")
	}
	return nil
}

// CheckNKeySeedFile reports whether path can be read and holds a user NKey
// seed (a line starting with SU). Its errors never show what the file holds.
func CheckNKeySeedFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the seed file: %w", err)
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("no user NKey seed found (want one starting with SU): %w", err)
	}
	kp.Wipe()
	return nil
}

// wipe overwrites a secret read from a file once it is no longer needed.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
