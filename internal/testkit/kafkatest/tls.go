package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLS is a certificate authority made for one test, a server certificate
// for 127.0.0.1 and a client certificate it signed, in PEM files.
type TLS struct {
	// CAFile is the authority's certificate.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key.
	CertFile, KeyFile string
	// Server is the listener's configuration: the server certificate, and
	// client certificates verified against the authority when
	// RequireClientCert is called.
	Server *tls.Config
}

// NewTLS makes an authority, a server and a client certificate, valid for
// an hour, with the files under t.TempDir().
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCert(t, "kafkatest CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	})
	srvKey, _, srvDER := newCert(t, "127.0.0.1", caCert, caKey, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	cliKey, _, cliDER := newCert(t, "relay", caCert, caKey, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	out := &TLS{
		CAFile:   writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER),
		CertFile: writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", cliDER),
		KeyFile:  writePEM(t, filepath.Join(dir, "client-key.pem"), "EC PRIVATE KEY", marshalKey(t, cliKey)),
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	out.Server = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
		ClientCAs:    pool,
	}
	return out
}

// RequireClientCert makes the server refuse clients without a certificate
// the authority signed.
func (c *TLS) RequireClientCert() { c.Server.ClientAuth = tls.RequireAndVerifyClientCert }

func newCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, configure func(*x509.Certificate)) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	configure(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func marshalKey(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, path, kind string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
