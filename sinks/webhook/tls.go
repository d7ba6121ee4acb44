package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// validateTLS checks that the TLS files can apply: a certificate comes with
// its key, the URL is https, and no Transport was given that they would not
// reach. The files themselves are read by newTransport.
func (c Config) validateTLS() error {
	if c.TLSCAFile == "" && c.TLSCertFile == "" && c.TLSKeyFile == "" {
		return nil
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("TLSCertFile and TLSKeyFile go together: set both or neither")
	}
	if u, err := url.Parse(c.URL); err != nil || !strings.EqualFold(u.Scheme, "https") {
		return errors.New("TLSCAFile, TLSCertFile: TLS files need an https:// URL")
	}
	if c.Transport != nil {
		return errors.New("Transport: set together with TLS files, which it would ignore; configure TLS in the transport")
	}
	return nil
}

// newTransport returns the transport of a sink without Config.Transport: a
// clone of http.DefaultTransport (proxies from the environment, HTTP/2,
// dial and handshake timeouts) keeping Concurrency idle connections, with
// c's TLS files.
func newTransport(c Config) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = c.Concurrency
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	t.TLSClientConfig = tlsConfig
	return t, nil
}

// tlsConfig reads c's TLS files into a client configuration: nil without
// files (Go's defaults, verifying against the system roots). A CA file
// replaces the system roots. Its errors name the field and never show what
// a file holds.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCAFile == "" && c.TLSCertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pool, err := sinks.LoadCAFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("TLSCAFile: %w", err)
		}
		cfg.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := sinks.LoadClientCert(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLSCertFile, TLSKeyFile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
