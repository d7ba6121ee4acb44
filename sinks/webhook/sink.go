package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
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
	probed  probed // messages whose probe failed (probe.go)
	tls     alarm  // failed TLS handshakes
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
// that a receiver hanging on some requests cannot take every slot. After a
// pause the first request probes the endpoint and the others wait for its
// result (probe.go). Messages left when ctx ends, when its deadline is
// closer than Config.Timeout or when the sink pauses are reported not
// attempted, and so are the failures that are the outage's rather than the
// message's (judge).
func (s *Sink) DeliverStream(ctx context.Context, msgs []sinks.Message, report func(i int, err error)) {
	deadline, hasDeadline := ctx.Deadline()
	var startBy <-chan time.Time // fires when no request can start anymore
	if hasDeadline {
		t := time.NewTimer(time.Until(deadline) - s.cfg.Timeout)
		defer t.Stop()
		startBy = t.C
	}
	var wg sync.WaitGroup
	order := s.probed.order(msgs, s.gate.probeDue())
	for k, i := range order {
		if err := s.startable(ctx, deadline, hasDeadline); err != nil {
			reportRest(report, order[k:], err)
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
		var t ticket
		if acquired {
			if t, err = s.admit(ctx, startBy, deadline, hasDeadline); err != nil {
				<-s.slots
			}
		} else if err = s.startable(ctx, deadline, hasDeadline); err == nil {
			err = errTooLate
		}
		if err != nil {
			reportRest(report, order[k:], err)
			break
		}
		wg.Go(func() {
			held := s.holdSlot()
			defer held.release()
			report(i, s.post(ctx, t, &msgs[i], header))
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

// reportRest reports err for the messages at indexes rest.
func reportRest(report func(int, error), rest []int, err error) {
	for _, i := range rest {
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
	return s.gate.paused(now)
}

// admit returns the gate's ticket for a request that starts now, or why
// none may (see startable). While another request probes the endpoint
// after a pause, it waits for the probe's result: the endpoint is back, and
// the request goes, or it is not, and the sink pauses again.
func (s *Sink) admit(ctx context.Context, startBy <-chan time.Time, deadline time.Time, hasDeadline bool) (ticket, error) {
	for {
		if err := s.startable(ctx, deadline, hasDeadline); err != nil {
			return ticket{}, err
		}
		t, probing, err := s.gate.admit(time.Now())
		if probing == nil {
			return t, err
		}
		select {
		case <-probing:
		case <-ctx.Done():
		case <-startBy:
			return ticket{}, errTooLate
		}
	}
}

// post makes one attempt to deliver m, admitted by the gate with t, and
// classifies the result (see doc.go).
func (s *Sink) post(ctx context.Context, t ticket, m *sinks.Message, header http.Header) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	// Whether the request was sent: a probe that was not (the connection
	// or the TLS handshake failed) did not try the message.
	var wrote atomic.Bool
	if t.probe {
		rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
			WroteRequest: func(w httptrace.WroteRequestInfo) { wrote.Store(w.Err == nil) },
		})
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.cfg.URL, bytes.NewReader(m.Payload))
	if err != nil {
		s.gate.done(t, time.Now(), result{sig: signalNone})
		return fmt.Errorf("make webhook request: %w", err)
	}
	// Signed now, right before sending: the timestamp is this attempt's.
	now := time.Now()
	header[headerTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
	header[headerSignature] = []string{signature(s.cfg.Secrets, m.IdempotencyKey, now.Unix(), m.Payload)}
	req.Header = header

	sent := time.Now()
	resp, err := s.client.Do(req)
	var r result
	if err != nil {
		r = s.noResponse(ctx, rctx, err)
	} else {
		s.latency.observe(time.Since(sent))
		r = s.response(resp)
	}
	return s.judge(t, m, r, wrote.Load())
}

// response classifies a response and closes its body.
func (s *Sink) response(resp *http.Response) result {
	s.tls.clear("TLS handshakes with the webhook endpoint succeed again")
	r := result{sig: signalUp, status: resp.StatusCode}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		discard(resp.Body)
		return r
	}
	serr := readResponse(resp)
	r.err = serr
	if serr.Permanent() {
		r.err = sinks.Permanent(serr)
		return r
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := parseRetryAfter(v, time.Now()); ok {
			d = min(d, s.cfg.MaxRetryAfter)
			r.sig, r.retryAfter = signalWait, d
			r.err = sinks.RetryAfter(fmt.Errorf("%w (Retry-After %s)", serr, d), d)
			return r
		}
	}
	if resp.StatusCode >= 500 {
		r.sig = signalDown
	}
	return r
}

// judge passes the result r of the request for m admitted with t to the
// gate, logs what the gate made of it, and returns m's outcome: r's error,
// marked not attempted (the row is put back without spending an attempt)
// when the failure is the outage's, not m's: a pause began while the
// request was in flight, or the request was the probe and failed as it
// would whatever it carried (probe.go). sent says whether the request was
// written, for probes.
func (s *Sink) judge(t ticket, m *sinks.Message, r result, sent bool) error {
	v := s.gate.done(t, time.Now(), r)
	if v.recovered {
		s.probed.clear()
		s.log.Info("webhook endpoint answers again; circuit breaker closed", "status", r.status)
	}
	if v.pause > 0 {
		s.logPause(v, r)
	}
	switch {
	case r.err == nil || r.sig == signalUp || r.sig == signalNone:
		return r.err
	case v.stale:
		return fmt.Errorf("%w: the webhook sink paused while the request was in flight: %w", sinks.ErrNotAttempted, r.err)
	case t.probe:
		s.probed.add(m.IdempotencyKey)
		if probeFailureIsFree(sent, r.status) {
			return fmt.Errorf("%w: the probe found the webhook endpoint still down: %w", sinks.ErrNotAttempted, r.err)
		}
	}
	return r.err
}

// logPause logs the pause v began after result r: at warn when the
// endpoint went down, at debug when a probe found it still down (the
// relay reminds of the outage at growing intervals).
func (s *Sink) logPause(v verdict, r result) {
	const then = "pausing deliveries: rows wait without spending attempts, and after the pause one request probes the endpoint"
	switch {
	case v.reopened:
		s.log.Debug("webhook endpoint still down; "+then, "pause", v.pause, "status", r.status, "err", r.err)
	case r.sig == signalWait:
		s.log.Warn("most webhook responses ask to retry later; "+then, "status", r.status, "retry_after", r.retryAfter)
	case r.status != 0:
		s.log.Warn("webhook endpoint answers every request with a server error; "+then, "pause", v.pause, "status", r.status, "err", r.err)
	default:
		s.log.Warn("webhook endpoint is not responding; "+then, "pause", v.pause, "err", r.err)
	}
}

// noResponse classifies a request that got no response: the caller's
// context ended (not the endpoint's fault, signalNone), the request timed
// out, or the connection failed, the TLS handshake included. The last two
// are transient and show the endpoint down: a certificate that does not
// verify fails every message alike, so no row is dead-lettered for it. A
// failed handshake is also logged at error level, once per reason. The
// URL is left out of the error: it may hold credentials or a token.
func (s *Sink) noResponse(ctx, rctx context.Context, err error) result {
	if ctx.Err() != nil {
		return result{sig: signalNone, err: fmt.Errorf("post webhook: interrupted: %w", ctx.Err())}
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
	return result{sig: signalDown, err: err}
}

// Available reports whether the sink can deliver now: an error wrapping
// sinks.ErrNotAttempted while it is paused (Retry-After, circuit breaker),
// while one request probes the endpoint after a pause, or once closed.
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
