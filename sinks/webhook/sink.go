package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Sink posts messages to a webhook URL. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
	slots  chan struct{} // one per request in flight
	gate   gate
	closed atomic.Bool
}

var _ sinks.Sink = (*Sink)(nil)

// New validates cfg and returns a sink. It does not contact the URL.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("webhook config: %w", err)
	}
	transport := cfg.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = cfg.Concurrency
		transport = t
	}
	return &Sink{
		cfg: cfg,
		client: &http.Client{
			Transport: transport,
			// Never follow: a redirect is reported, not obeyed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log:   cfg.Logger.With("sink", "webhook", "url", redactURL(cfg.URL)),
		slots: make(chan struct{}, cfg.Concurrency),
	}, nil
}

var (
	errClosed   = fmt.Errorf("%w: webhook sink closed", sinks.ErrNotAttempted)
	errTooLate  = fmt.Errorf("%w: too close to the delivery deadline to start a webhook request", sinks.ErrNotAttempted)
	errTimedOut = errors.New("no response within the webhook timeout")
)

// Deliver posts each message and reports one outcome per message. Requests
// run concurrently, at most Config.Concurrency across the sink. Messages
// left when ctx ends, when its deadline is closer than Config.Timeout or
// when the sink pauses are reported not attempted.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	deadline, hasDeadline := ctx.Deadline()
	var startBy <-chan time.Time // fires when no request can start anymore
	if hasDeadline {
		t := time.NewTimer(time.Until(deadline) - s.cfg.Timeout)
		defer t.Stop()
		startBy = t.C
	}
	var wg sync.WaitGroup
	for i := range msgs {
		if err := s.startable(ctx, deadline, hasDeadline); err != nil {
			sinks.Fill(errs[i:], err)
			break
		}
		header, err := requestHeader(&msgs[i], s.cfg.UserAgent)
		if err != nil {
			errs[i] = err
			continue
		}
		acquired := false
		select {
		case s.slots <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		case <-startBy:
		}
		// Waiting for a slot took time: a pause may have begun, the
		// deadline may be near.
		err = s.startable(ctx, deadline, hasDeadline)
		if err == nil && !acquired {
			err = errTooLate
		}
		if err != nil {
			if acquired {
				<-s.slots
			}
			sinks.Fill(errs[i:], err)
			break
		}
		wg.Go(func() {
			defer func() { <-s.slots }()
			errs[i] = s.post(ctx, &msgs[i], header)
		})
	}
	wg.Wait()
	return errs
}

// startable returns why a request cannot start now, or nil.
func (s *Sink) startable(ctx context.Context, deadline time.Time, hasDeadline bool) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", sinks.ErrNotAttempted, err)
	}
	now := time.Now()
	if hasDeadline && deadline.Sub(now) < s.cfg.Timeout {
		return errTooLate
	}
	return s.gate.check(now)
}

// post makes one attempt to deliver m and classifies the result.
func (s *Sink) post(ctx context.Context, m *sinks.Message, header http.Header) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.cfg.URL, bytes.NewReader(m.Payload))
	if err != nil {
		return fmt.Errorf("make webhook request: %w", err)
	}
	// Signed now, right before sending: the timestamp is this attempt's.
	now := time.Now()
	header[headerTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
	header[headerSignature] = []string{signature(s.cfg.Secrets, m.IdempotencyKey, now.Unix(), m.Payload)}
	req.Header = header

	resp, err := s.client.Do(req)
	if err != nil {
		return s.noResponse(ctx, rctx, err)
	}
	if s.gate.responded() {
		s.log.Info("webhook endpoint responds again; circuit breaker closed", "status", resp.StatusCode)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		discard(resp.Body)
		return nil
	}
	serr := readResponse(resp)
	if serr.Permanent() {
		return sinks.Permanent(serr)
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := parseRetryAfter(v, time.Now()); ok {
			d = min(d, s.cfg.MaxRetryAfter)
			if s.gate.retryAfter(time.Now(), d, resp.StatusCode) {
				s.log.Warn("webhook endpoint asked to retry later; pausing deliveries",
					"status", resp.StatusCode, "retry_after", d)
			}
			return sinks.RetryAfter(fmt.Errorf("%w (Retry-After %s)", serr, d), d)
		}
	}
	return serr
}

// noResponse classifies a request that got no response: the caller's
// context ended (not the endpoint's fault), the request timed out, or the
// connection failed. The last two count towards the circuit breaker. The
// URL is left out of the error: it may hold credentials or a token.
func (s *Sink) noResponse(ctx, rctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("post webhook: interrupted: %w", ctx.Err())
	}
	if rctx.Err() != nil {
		err = fmt.Errorf("post webhook: %w (%s): %w", errTimedOut, s.cfg.Timeout, rctx.Err())
	} else {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		err = fmt.Errorf("post webhook: %w", err)
	}
	if pause := s.gate.connectionFailed(time.Now()); pause > 0 {
		s.log.Warn("webhook endpoint is not responding; pausing deliveries",
			"pause", pause, "err", err)
	}
	return err
}

// Available reports whether the sink can deliver now: an error wrapping
// sinks.ErrNotAttempted while it is paused (Retry-After, circuit breaker) or
// closed.
func (s *Sink) Available() error {
	if s.closed.Load() {
		return errClosed
	}
	return s.gate.check(time.Now())
}

// Close stops the sink: later deliveries are not attempted. Requests in
// flight finish; idle connections are closed.
func (s *Sink) Close() error {
	s.closed.Store(true)
	s.client.CloseIdleConnections()
	return nil
}
