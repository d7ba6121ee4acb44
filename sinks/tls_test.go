package sinks_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/tlstest"
	"github.com/outbox-relay/outbox-relay/sinks"
)

func TestLoadCAFile(t *testing.T) {
	t.Parallel()
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	dir := t.TempDir()
	write := func(name string, parts ...string) string {
		var b strings.Builder
		for _, p := range parts {
			content, err := os.ReadFile(p)
			if err != nil {
				content = []byte(p)
			}
			b.Write(content)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bundle := write("bundle.pem", "# two CAs\n", ca.CertFile, other.CertFile)
	pool, err := sinks.LoadCAFile(bundle)
	if err != nil {
		t.Fatalf("a bundle of two CAs: %v", err)
	}
	for _, c := range []*tlstest.CA{ca, other} {
		leaf := c.Issue(t, "127.0.0.1").TLS.Leaf
		if _, err := leaf.Verify(x509VerifyOptions(pool)); err != nil {
			t.Errorf("a certificate of a CA in the bundle does not verify: %v", err)
		}
	}
	if _, err := ca.Issue(t).TLS.Leaf.Verify(x509VerifyOptions(pool)); err != nil {
		t.Errorf("client certificate: %v", err)
	}

	for name, path := range map[string]string{
		"missing":  filepath.Join(dir, "missing.pem"),
		"garbage":  write("garbage.pem", "s3cr3t"),
		"key only": ca.Issue(t).KeyFile,
		"broken":   write("broken.pem", "-----BEGIN CERTIFICATE-----\nczNjcjN0\n-----END CERTIFICATE-----\n"),
	} {
		_, err := sinks.LoadCAFile(path)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "czNjcjN0") {
			t.Errorf("%s: %q shows what the file holds", name, err)
		}
	}
}

func TestLoadClientCert(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	a, b := ca.Issue(t), ca.Issue(t)
	if _, err := sinks.LoadClientCert(a.CertFile, a.KeyFile); err != nil {
		t.Errorf("a certificate and its key: %v", err)
	}
	if _, err := sinks.LoadClientCert(a.CertFile, b.KeyFile); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("another certificate's key: %v", err)
	}
	if _, err := sinks.LoadClientCert(a.KeyFile, a.CertFile); err == nil {
		t.Error("switched files accepted")
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, files := range [][2]string{{missing, a.KeyFile}, {a.CertFile, missing}} {
		_, err := sinks.LoadClientCert(files[0], files[1])
		var pathErr *os.PathError
		if !errors.As(err, &pathErr) || pathErr.Path != missing {
			t.Errorf("LoadClientCert(%s, %s): %v, want a *fs.PathError naming the missing file", files[0], files[1], err)
		}
	}
}

func TestTLSFailure(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ca.ServerConfig(ca.Issue(t, "127.0.0.1"), false))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	_, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS12})
	wrapped := fmt.Errorf("outer: %w", fmt.Errorf("inner prefix: %w", err))
	failure := sinks.TLSFailure(wrapped)
	if failure == nil || !strings.Contains(failure.Error(), "x509: certificate signed by unknown authority") || strings.Contains(failure.Error(), "prefix") {
		t.Errorf("TLSFailure(%v) = %v, want the verification error alone", wrapped, failure)
	}
	for _, err := range []error{
		errors.New("EOF"),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
	} {
		if f := sinks.TLSFailure(err); f != nil {
			t.Errorf("TLSFailure(%v) = %v, want nil", err, f)
		}
	}
}

func x509VerifyOptions(pool *x509.CertPool) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
}
