package sqs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// throttleDelay is how long a throttled request waits, at least, before
// its messages are sent again.
const throttleDelay = time.Second

// noQueue reports whether err is SQS saying the queue does not exist.
func noQueue(err error) bool {
	var nq *types.QueueDoesNotExist
	if errors.As(err, &nq) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || api.ErrorCode() == "QueueDoesNotExist")
}

// throttled reports whether code is a throttling error's.
func throttled(code string) bool {
	c := strings.ToLower(code)
	return strings.Contains(c, "throttl") || c == "requestlimitexceeded" || c == "slowdown" || c == "toomanyrequestsexception"
}

// authCode reports whether code is SQS refusing the relay's credentials
// (not a message): a setup problem, never permanent.
func authCode(code string) bool {
	switch code {
	case "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "ExpiredToken",
		"ExpiredTokenException", "MissingAuthenticationToken", "IncompleteSignature", "InvalidSecurity", "InvalidSignatureException":
		return true
	}
	return false
}

// deniedCode reports whether code is SQS denying an action (IAM or a
// queue policy, or the queue's KMS key): a setup problem.
func deniedCode(code string) bool {
	c := strings.ToLower(code)
	return strings.Contains(c, "accessdenied") || strings.HasPrefix(c, "kms")
}

// entryError is the outcome of one entry SendMessageBatch failed: a
// sender fault is permanent (the message is invalid: too large, bad
// characters, a FIFO id SQS refuses), except throttling and what the
// setup causes (access, KMS); server faults are retried.
func entryError(queue string, f types.BatchResultErrorEntry) error {
	code := derefOr(f.Code, "unknown")
	err := fmt.Errorf("SQS refused the message for queue %s: %s: %s", queue, code, derefOr(f.Message, ""))
	switch {
	case throttled(code):
		return sinks.RetryAfter(fmt.Errorf("throttled: %w", err), throttleDelay)
	case deniedCode(code), authCode(code):
		return fmt.Errorf("check the relay's IAM policy and the queue's (and its KMS key's) policy; retrying: %w", err)
	case f.SenderFault:
		return sinks.Permanent(err)
	}
	return err
}

// requestError is the outcome of every message of a SendMessageBatch that
// failed as a whole.
func requestError(queue string, err error) error {
	if noQueue(err) {
		return sinks.Permanent(fmt.Errorf("%w: %s (create it, or route the row elsewhere): %w", errNoQueue, queue, err))
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		switch {
		case throttled(code):
			return sinks.RetryAfter(fmt.Errorf("SQS throttles the relay on queue %s: %w", queue, err), throttleDelay)
		case authCode(code):
			return fmt.Errorf("SQS refuses the relay's credentials (the AWS credential chain: AWS_* variables, web identity, instance metadata); retrying: %w", err)
		case deniedCode(code):
			return fmt.Errorf("SQS denies the relay sqs:SendMessage on queue %s (its IAM policy or the queue's policy); retrying: %w", queue, err)
		}
	}
	return fmt.Errorf("send to SQS queue %s: %w", queue, err)
}

func derefOr(p *string, or string) string {
	if p == nil {
		return or
	}
	return *p
}
