package sinks

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLS files, read the same way by every sink that takes them: a CA bundle
// that replaces the system roots, and a client certificate with its key.
// Their errors say what is wrong with a file without repeating anything it
// holds.

// LoadCAFile reads path, a PEM file of one or more CA certificates, and
// returns a pool holding only those certificates (not the system roots).
// Blocks other than CERTIFICATE are skipped; a file without any
// certificate, or with one that does not parse, is refused.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		n++
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the CA file does not parse: %w", n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, errors.New("the CA file holds no PEM certificate")
	}
	return pool, nil
}

// LoadClientCert reads a PEM certificate (the client's, then any
// intermediates) and its PEM private key, and checks that they belong
// together. A file that cannot be read gives an error wrapping the
// *fs.PathError that names it.
func LoadClientCert(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read the certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read the key file: %w", err)
	}
	// tls.X509KeyPair's errors describe the PEM blocks, never their bytes.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate and key: %w", err)
	}
	return cert, nil
}

// TLSFailure returns the error in err's chain that tells how a TLS
// handshake failed, or nil when err is no TLS failure: a certificate that
// does not verify (unknown authority, wrong host name, expired), an alert
// from the peer (say, a server that requires a client certificate), or a
// peer that does not speak TLS. Such a failure is the same for every
// message: the setup needs fixing. The error returned reads the same
// whatever wrapped it on the way (clients add their own prefixes), so its
// text is a stable reason to report once.
func TLSFailure(err error) error {
	var (
		verification *tls.CertificateVerificationError
		unknown      x509.UnknownAuthorityError
		hostname     x509.HostnameError
		invalid      x509.CertificateInvalidError
		alert        tls.AlertError
		record       tls.RecordHeaderError
		op           *net.OpError
	)
	switch {
	case errors.As(err, &verification):
		return verification
	case errors.As(err, &unknown):
		return unknown
	case errors.As(err, &hostname):
		return hostname
	case errors.As(err, &invalid):
		return invalid
	case errors.As(err, &alert):
		return alert
	case errors.As(err, &record):
		return record
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert received from the peer so.
		return op
	}
	return nil
}
