package sns

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// throttleDelay is how long a throttled request waits, at least, before
// its messages are sent again.
const throttleDelay = time.Second

// noTopic reports whether err is SNS saying the topic does not exist.
func noTopic(err error) bool {
	var nf *types.NotFoundException
	if errors.As(err, &nf) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "NotFound" || api.ErrorCode() == "NotFoundException")
}

// throttled reports whether code is a throttling error's.
func throttled(code string) bool {
	c := strings.ToLower(code)
	return strings.Contains(c, "throttl") || c == "requestlimitexceeded" || c == "slowdown" || c == "toomanyrequestsexception"
}

// authCode reports whether code is SNS refusing the relay's credentials
// (not a message): a setup problem, never permanent.
func authCode(code string) bool {
	switch code {
	case "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "ExpiredToken",
		"ExpiredTokenException", "MissingAuthenticationToken", "IncompleteSignature", "InvalidSecurity", "InvalidSignatureException":
		return true
	}
	return false
}

// deniedCode reports whether code is SNS denying an action (IAM or the
// topic's policy, or the topic's KMS key): a setup problem.
func deniedCode(code string) bool {
	c := strings.ToLower(code)
	return strings.Contains(c, "accessdenied") || c == "authorizationerror" || strings.HasPrefix(c, "kms")
}

// entryError is the outcome of one entry PublishBatch failed: a sender
// fault is permanent (the message is invalid: too large, bad characters,
// a FIFO id SNS refuses), except throttling and what the setup causes
// (access, KMS); server faults are retried.
func entryError(topic string, f types.BatchResultErrorEntry) error {
	code := derefOr(f.Code, "unknown")
	err := fmt.Errorf("SNS refused the message for topic %s: %s: %s", topic, code, derefOr(f.Message, ""))
	switch {
	case throttled(code):
		return sinks.RetryAfter(fmt.Errorf("throttled: %w", err), throttleDelay)
	case deniedCode(code), authCode(code):
		return fmt.Errorf("check the relay's IAM policy and the topic's (and its KMS key's) policy; retrying: %w", err)
	case noTopic(&smithy.GenericAPIError{Code: code}):
		return sinks.Permanent(fmt.Errorf("%w: %s (create it, or route the row elsewhere): %w", errNoTopic, topic, err))
	case f.SenderFault:
		return sinks.Permanent(err)
	}
	return err
}

var errNoTopic = errors.New("the SNS topic does not exist")

// requestError is the outcome of every message of a PublishBatch that
// failed as a whole.
func requestError(topic string, err error) error {
	if noTopic(err) {
		return sinks.Permanent(fmt.Errorf("%w: %s (create it, or route the row elsewhere): %w", errNoTopic, topic, err))
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		switch {
		case throttled(code):
			return sinks.RetryAfter(fmt.Errorf("SNS throttles the relay on topic %s: %w", topic, err), throttleDelay)
		case authCode(code):
			return fmt.Errorf("SNS refuses the relay's credentials (the AWS credential chain: AWS_* variables, web identity, instance metadata); retrying: %w", err)
		case deniedCode(code):
			return fmt.Errorf("SNS denies the relay sns:Publish on topic %s (its IAM policy, the topic's policy or its KMS key's); retrying: %w", topic, err)
		}
	}
	return fmt.Errorf("publish to SNS topic %s: %w", topic, err)
}

func derefOr(p *string, or string) string {
	if p == nil {
		return or
	}
	return *p
}
