package rabbitmq

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// loadTLS builds the TLS configuration of an amqps connection from the
// files in cfg; it returns nil when none is set (amqp091 then verifies the
// broker with the system's roots).
func loadTLS(cfg Config, amqps bool) (*tls.Config, error) {
	if cfg.TLSCAFile == "" && cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, nil
	}
	if !amqps {
		return nil, errors.New("RabbitMQ TLS files are set but the URL is not amqps://")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("read RabbitMQ CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("RabbitMQ CA file %s holds no PEM certificate", cfg.TLSCAFile)
		}
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("a RabbitMQ client certificate needs both a certificate file and a key file")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("load RabbitMQ client certificate %s: %w", cfg.TLSCertFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
