package cli

import (
	"errors"
	"io/fs"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// checkTLSFiles checks a sink's TLS files, given by the names of their
// variables: each file that is set must be readable and parse, and a client
// certificate comes with its key. The error names the variable of the file
// at fault and never shows what a file holds.
func (c *config) checkTLSFiles(caVar, certVar, keyVar string) error {
	get := func(name string) string { return configField(name).value(c).String() }
	ca, cert, key := get(caVar), get(certVar), get(keyVar)
	if ca != "" {
		if _, err := sinks.LoadCAFile(ca); err != nil {
			return c.refuse(caVar, err.Error())
		}
	}
	switch {
	case cert == "" && key == "":
		return nil
	case key == "":
		return c.refuse(certVar, keyVar+" is not set: a client certificate needs its private key")
	case cert == "":
		return c.refuse(keyVar, certVar+" is not set: a private key needs its client certificate")
	}
	if _, err := sinks.LoadClientCert(cert, key); err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) && pathErr.Path == key {
			return c.refuse(keyVar, err.Error())
		}
		return c.refuse(certVar, err.Error()+" (with "+keyVar+")")
	}
	return nil
}

// strayFiles refuses the first of vars that is set while the sink it
// belongs to is not enabled (by enabler): a value that reaches nothing is
// a mistake.
func (c *config) strayFiles(enabler string, vars ...string) error {
	for _, name := range vars {
		if configField(name).value(c).String() != "" {
			return c.refuse(name, "set without "+enabler)
		}
	}
	return nil
}
