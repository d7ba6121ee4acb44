package rabbitmq_test

import (
	"context"
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
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/rabbitmq"
)

// The broker of these tests has no TLS listener (adding one means
// reconfiguring and restarting it). These tests check the sink's side of
// amqps against a TLS server in the test process that requires a client
// certificate, then hangs up: the handshake is real, the AMQP after it is
// not there.

// pki is a test CA with a server certificate for 127.0.0.1 and a client
// certificate, as files.
type pki struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outbox-relay test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	p := &pki{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "client.pem"),
		keyFile:  filepath.Join(dir, "client-key.pem"),
		pool:     x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	clientDER, clientKey := issue(2, "outbox-relay-client", x509.ExtKeyUsageClientAuth)
	writePEM(t, p.certFile, "CERTIFICATE", clientDER)
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.keyFile, "PRIVATE KEY", keyDER)
	serverDER, serverKey := issue(3, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	p.server = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsServer accepts TLS connections that present a client certificate
// signed by p's CA, sends the common name of each on the returned channel,
// and hangs up. It returns the server's amqps URL.
func tlsServer(t *testing.T, p *pki) (string, <-chan string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.pool,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	clients := make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.Handshake(); err != nil {
					return
				}
				if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
					select {
					case clients <- certs[0].Subject.CommonName:
					default:
					}
				}
			}()
		}
	}()
	return "amqps://guest:guest@" + ln.Addr().String() + "/", clients
}

func TestTLS_ClientCertificateAndCA(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	url, clients := tlsServer(t, p)
	s, err := rabbitmq.New(rabbitmq.Config{URL: url, TLSCAFile: p.caFile, TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, Logger: slogTo(t.Output())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case cn := <-clients:
		if cn != "outbox-relay-client" {
			t.Errorf("the server saw client certificate %q", cn)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no TLS handshake with the client certificate: the sink did not trust the CA of RABBITMQ_TLS_CA_FILE, or sent no certificate")
	}
	if s.Available() == nil {
		t.Error("available without an AMQP handshake")
	}
}

func TestTLS_HandshakeFailuresAreStartupProblems(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	url, _ := tlsServer(t, p)
	tests := []struct {
		name string
		cfg  rabbitmq.Config
	}{
		// The system's roots do not know the test CA.
		{"UnknownCA", rabbitmq.Config{URL: url, TLSCertFile: p.certFile, TLSKeyFile: p.keyFile}},
		// The server requires a client certificate.
		{"NoClientCertificate", rabbitmq.Config{URL: url, TLSCAFile: p.caFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Logger = slogTo(t.Output())
			s, err := rabbitmq.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			problems, err := s.CheckStartup(ctx)
			if err != nil {
				t.Fatalf("CheckStartup: %v", err)
			}
			if !slices.ContainsFunc(problems, func(p sinks.Problem) bool { return p.Code == rabbitmq.ProblemTLSFailed }) {
				t.Errorf("problems %+v, want %s", problems, rabbitmq.ProblemTLSFailed)
			}
		})
	}
}
