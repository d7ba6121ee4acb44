// Package sinks defines what the relay asks of a destination: take a batch
// of messages and report one outcome per message.
//
// # Outcomes
//
// An outcome is an error: nil means the destination durably accepted the
// message (a JetStream PubAck, a 2xx response, a Kafka produce
// acknowledgement, a RabbitMQ publisher confirm); an error wrapped with
// Permanent means it never will, so the row goes to the dead letters at
// once; an error wrapping ErrNotAttempted puts the row back without counting
// an attempt; any other error is transient and the row is retried with
// backoff, not sooner than a delay given with RetryAfter.
//
// # Writing a sink
//
// A sink is one package under sinks/ (sinks/nats, sinks/webhook, …), one
// file in internal/cli that declares it (its sinkKind), reads its
// environment variables, validates them, builds the package's Config and
// opens the sink, and its line in internal/cli's sinkKinds. Every place a
// new sink touches is listed in docs/development.md, Adding a sink, which
// internal/cli's TestSinkKinds_HaveWhatAddingASinkLists checks.
//
//  1. Define Config with documented defaults and New(Config) (*Sink, error).
//     New must not block on the network: a destination that is down at start
//     is retried in the background, and Available reports it meanwhile.
//  2. Implement Sink.Deliver. It is called from several goroutines at once,
//     each with its own batch. Return by the context's deadline; report
//     messages you could not finish as transient errors (or ErrNotAttempted
//     when they were never sent). Never report a message delivered without
//     the destination's acknowledgement.
//  3. Classify failures: what retrying cannot fix (too large, invalid name)
//     is Permanent; a destination that asks for a delay is RetryAfter.
//  4. Send the message's IdempotencyKey with every copy, in the header or
//     property the destination or its consumers dedupe by.
//  5. Implement the optional capabilities that apply (capabilities.go):
//     Availability, StartupChecker, io.Closer.
//  6. Take credentials and TLS as files (paths in Config, *_FILE variables
//     in the CLI): read a CA bundle with LoadCAFile (it replaces the system
//     roots) and a client certificate with LoadClientCert, check them in
//     New, and never log what they hold. A destination that refuses the
//     credentials or a handshake that fails (TLSFailure recognises it) is
//     a setup problem, the same for every message: never Permanent; log it
//     at error level once per reason, not once per retry, and let
//     Available's error carry the reason, which /readyz shows.
//  7. Call CheckMessage before sending (the header rules, the header
//     budget, the idempotency key), then refuse what the destination can
//     never take, as Permanent: nothing a row holds may close a
//     connection. A client that gives up reconnecting must be replaced.
//  8. Assert var _ sinks.Sink = (*Sink)(nil) and run the conformance suite
//     (sinktest.Run) and the hostile-row suite (sinktest.RunHostile, and
//     sinktest.FuzzHostile from a FuzzHostileRows target) from the
//     package's tests, against a real server started by the test, and
//     add the sink to TestProcess_HostileRowsStopNothing in internal/cli,
//     which runs the same rows through the binary. A sink is not done
//     until it passes both.
//
// Sinks never import package relay.
package sinks
