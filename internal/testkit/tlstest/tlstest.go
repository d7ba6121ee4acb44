// Package tlstest makes certificates for tests: a private certificate
// authority, made fresh for each test, that issues server and client
// certificates, each also written as PEM files in the test's temporary
// directory, where the code under test reads them as an operator's files.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a private certificate authority.
type CA struct {
	// CertFile is the CA's certificate as a PEM file: what a client is
	// told to trust.
	CertFile string
	// Pool holds the CA's certificate.
	Pool *x509.CertPool

	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	issued atomic.Int64
}

// Cert is a certificate the CA issued, with its private key.
type Cert struct {
	// CertFile and KeyFile are the certificate and its key as PEM files.
	CertFile string
	KeyFile  string
	// TLS is the certificate and key, ready for a tls.Config.
	TLS tls.Certificate
}

// NewCA makes a CA whose files live in t's temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "outbox-relay test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Pool: x509.NewCertPool(), cert: cert, key: key, dir: t.TempDir()}
	ca.Pool.AddCert(cert)
	ca.CertFile = writePEM(t, ca.dir, "ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for hosts (IP addresses or DNS names), valid
// for servers and for clients. Without hosts it is a client certificate
// named "client".
func (ca *CA) Issue(t testing.TB, hosts ...string) *Cert {
	t.Helper()
	n := ca.issued.Add(1)
	key := newKey(t)
	name := "client"
	if len(hosts) > 0 {
		name = hosts[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("issue a certificate for %v: %v", hosts, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		CertFile: writePEM(t, ca.dir, fmt.Sprintf("cert-%d.pem", n), "CERTIFICATE", der),
		KeyFile:  writePEM(t, ca.dir, fmt.Sprintf("key-%d.pem", n), "PRIVATE KEY", keyDER),
	}
	c.TLS, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ServerConfig returns a server's TLS configuration presenting cert; with
// requireClientCert, clients must present a certificate this CA issued.
func (ca *CA) ServerConfig(cert *Cert, requireClientCert bool) *tls.Config {
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert.TLS},
		MinVersion:   tls.VersionTLS12,
	}
	if requireClientCert {
		cfg.ClientCAs = ca.Pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, dir, name, blockType string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
