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

	"go.opentelemetry.io/otel/attribute"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// Sink posts messages to a webhook URL. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
	slots  chan struct{} // one per request in flight
	slow   chan struct{} // one per slow request that gave its slot up
	// latency averages the receiver's response times (slots.go).
	latency latency
	gate    gate
	tls     alarm // failed TLS handshakes
	closed  atomic.Bool
	// dropped holds the names of the reserved row headers already logged
	// (see warnDropped), at most droppedMax of them.
	dropped  sync.Map
	nDropped atomic.Int32
	// traceDest and traceAttrs are TraceDestination's and
	// TraceAttributes' answers.
	traceDest  string
	traceAttrs []attribute.KeyValue
}

// droppedMax bounds the header names warnDropped remembers: rows can make
// up any number of X-Forwarded- names.
const droppedMax = 64

var (
	_ sinks.Sink     = (*Sink)(nil)
	_ sinks.Streamer = (*Sink)(nil)
)

// New validates cfg and returns a sink. It does not contact the URL.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("webhook config: %w", err)
	}
	transport := cfg.Transport
	if transport == nil {
		t, err := newTransport(cfg)
		if err != nil {
			return nil, fmt.Errorf("webhook config: %w", err)
		}
		transport = t
	}
	log := cfg.Logger.With("sink", "webhook", "url", RedactURL(cfg.URL))
	traceDest, traceAttrs := traceAttributes(cfg.URL)
	return &Sink{
		cfg:        cfg,
		traceDest:  traceDest,
		traceAttrs: traceAttrs,
		client: &http.Client{
			Transport: transport,
			// Never follow: a redirect is reported, not obeyed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log:   log,
		slots: make(chan struct{}, cfg.Concurrency),
		slow:  make(chan struct{}, slowMax*cfg.Concurrency),
		tls:   alarm{log: log},
	}, nil
}

var (
	errClosed   = fmt.Errorf("%w: webhook sink closed", sinks.ErrNotAttempted)
	errTooLate  = fmt.Errorf("%w: too close to the delivery deadline to start a webhook request", sinks.ErrNotAttempted)
	errTimedOut = errors.New("no response within the webhook timeout")
)

// Deliver posts each message and returns one outcome per message; see
// DeliverStream.
func (s *Sink) Deliver(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	s.DeliverStream(ctx, msgs, func(i int, err error) { errs[i] = err })
	return errs
}

// DeliverStream posts each message and reports its outcome as soon as its
// response is in (sinks.Streamer). Requests run concurrently, at most
// Config.Concurrency across the sink, not counting requests that have
// waited long (see slots.go): those give their slot up, so
// that a receiver hanging on some requests cannot take every slot. Messages
// left when ctx ends, when its deadline is closer than Config.Timeout or
// when the sink pauses are reported not attempted.
func (s *Sink) DeliverStream(ctx context.Context, msgs []sinks.Message, report func(i int, err error)) {
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
			reportRest(report, i, len(msgs), err)
			break
		}
		if size := int64(len(msgs[i].Payload)); size > s.cfg.MaxBodyBytes {
			report(i, sinks.Permanent(&sinks.LimitError{What: "payload", Size: size, Limit: "WEBHOOK_MAX_BODY_BYTES", Max: s.cfg.MaxBodyBytes}))
			continue
		}
		header, dropped, err := requestHeader(&msgs[i], s.cfg.UserAgent)
		if err != nil {
			report(i, err)
			continue
		}
		s.warnDropped(dropped)
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
			reportRest(report, i, len(msgs), err)
			break
		}
		wg.Go(func() {
			held := s.holdSlot()
			defer held.release()
			report(i, s.post(ctx, &msgs[i], header))
		})
	}
	wg.Wait()
}

// warnDropped logs, at warn level and once per name for the life of the
// sink, that rows set headers it drops: a receiver must not get them from
// a row (see reservedHeaders). The rows are delivered without them.
func (s *Sink) warnDropped(names []string) {
	for _, name := range names {
		if _, seen := s.dropped.Load(name); seen || s.nDropped.Load() >= droppedMax {
			continue
		}
		if _, seen := s.dropped.LoadOrStore(name, true); !seen {
			s.nDropped.Add(1)
			s.log.Warn("rows set a header the webhook sink never sends from a row; it is dropped and the rows delivered without it (logged once per header)", "header", name)
		}
	}
}

// reportRest reports err for messages from to n-1.
func reportRest(report func(int, error), from, n int, err error) {
	for i := from; i < n; i++ {
		report(i, err)
	}
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

	sent := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return s.noResponse(ctx, rctx, err)
	}
	s.latency.observe(time.Since(sent))
	s.tls.clear("TLS handshakes with the webhook endpoint succeed again")
	if s.gate.responded() {
		s.log.Info("webhook endpoint responds again; circuit breaker closed", "status", resp.StatusCode)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		discard(resp.Body)
		s.gate.answered(time.Now(), false, 0, resp.StatusCode)
		return nil
	}
	serr := readResponse(resp)
	if serr.Permanent() {
		s.gate.answered(time.Now(), false, 0, resp.StatusCode)
		return sinks.Permanent(serr)
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := parseRetryAfter(v, time.Now()); ok {
			d = min(d, s.cfg.MaxRetryAfter)
			if s.gate.answered(time.Now(), true, d, resp.StatusCode) {
				s.log.Warn("most webhook responses ask to retry later; pausing deliveries to the endpoint",
					"status", resp.StatusCode, "retry_after", d)
			}
			return sinks.RetryAfter(fmt.Errorf("%w (Retry-After %s)", serr, d), d)
		}
	}
	s.gate.answered(time.Now(), false, 0, resp.StatusCode)
	return serr
}

// noResponse classifies a request that got no response: the caller's
// context ended (not the endpoint's fault), the request timed out, or the
// connection failed, the TLS handshake included. The last two are
// transient and count towards the circuit breaker: a certificate that does
// not verify fails every message alike, so no row is dead-lettered for it.
// A failed handshake is also logged at error level, once per reason. The
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
		if failure := sinks.TLSFailure(err); failure != nil {
			s.tls.raise("TLS handshake with the webhook endpoint failed: check WEBHOOK_TLS_CA_FILE, WEBHOOK_TLS_CERT_FILE and the endpoint's certificate; retrying", failure.Error())
			err = fmt.Errorf("post webhook: TLS handshake failed: %w", err)
		} else {
			err = fmt.Errorf("post webhook: %w", err)
		}
	}
	if pause := s.gate.connectionFailed(time.Now(), err); pause > 0 {
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
