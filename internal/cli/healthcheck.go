package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

func cmdHealthcheck(ctx context.Context, inv *Invocation, args []string) error {
	fs := newFlagSet("healthcheck [--url URL] [--timeout D]",
		"Probe the relay's /readyz on RELAY_HTTP_ADDR (for Docker's HEALTHCHECK: the image has no shell or curl).\n"+
			"Exits 0 when the relay is ready (database reachable, sinks connected, not draining), 1 otherwise.", inv.Stderr)
	target := fs.String("url", "", "URL to probe instead of http://RELAY_HTTP_ADDR/readyz")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	url := *target
	if url == "" {
		c, err := loadConfig(inv.Environ)
		if err != nil {
			return err
		}
		if c.HTTPAddr == "" {
			return &configError{Var: "RELAY_HTTP_ADDR", Reason: "the endpoint is disabled, so there is nothing to probe"}
		}
		url = "http://" + probeAddr(c.HTTPAddr) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError{errors.New("bad --url: not a URL (not shown: it may hold credentials)")}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// url.Error repeats the URL, credentials included: keep its cause.
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("probe %s: %w", webhook.RedactURL(url), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status + ": " + string(body))
	}
	_, err = inv.Stdout.Write(body)
	return err
}

// probeAddr turns a listen address into one to connect to: an empty or
// wildcard host means this machine.
func probeAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
