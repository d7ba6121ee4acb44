package sqs

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// TestRequestErrorClasses: a whole SendMessageBatch that fails, as SQS
// documents its errors (fauxqs never throttles nor checks credentials).
func TestRequestErrorClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err                   error
		permanent, retryAfter bool
	}{
		{&types.QueueDoesNotExist{Message: aws.String("gone")}, true, false},
		{&smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue"}, true, false},
		{&smithy.GenericAPIError{Code: "ThrottlingException"}, false, true},
		{&types.RequestThrottled{}, false, true},
		{&smithy.GenericAPIError{Code: "InvalidClientTokenId"}, false, false},
		{&smithy.GenericAPIError{Code: "AccessDenied"}, false, false},
		{&smithy.GenericAPIError{Code: "InternalError", Fault: smithy.FaultServer}, false, false},
		{errors.New("dial tcp: connection refused"), false, false},
	} {
		err := requestError("q", c.err)
		_, retryAfter := sinks.RetryDelay(err)
		if sinks.IsPermanent(err) != c.permanent || retryAfter != c.retryAfter {
			t.Errorf("%v: permanent %v, retry-after %v; want %v, %v", c.err, sinks.IsPermanent(err), retryAfter, c.permanent, c.retryAfter)
		}
	}
}

// entryErrorCases are SendMessageBatch's per-entry failures as SQS
// documents them (fauxqs never throttles nor checks KMS).
var entryErrorCases = []struct {
	entry                 types.BatchResultErrorEntry
	permanent, retryAfter bool
}{
	{types.BatchResultErrorEntry{Code: aws.String("InvalidMessageContents"), SenderFault: true}, true, false},
	{types.BatchResultErrorEntry{Code: aws.String("InvalidParameterValue"), SenderFault: true}, true, false},
	{types.BatchResultErrorEntry{Code: aws.String("ThrottlingException"), SenderFault: true}, false, true},
	{types.BatchResultErrorEntry{Code: aws.String("KmsThrottled"), SenderFault: true}, false, true},
	{types.BatchResultErrorEntry{Code: aws.String("KmsAccessDenied"), SenderFault: true}, false, false},
	{types.BatchResultErrorEntry{Code: aws.String("AccessDenied"), SenderFault: true}, false, false},
	{types.BatchResultErrorEntry{Code: aws.String("InternalError"), SenderFault: false}, false, false},
	{types.BatchResultErrorEntry{Code: aws.String("ServiceUnavailable"), SenderFault: false}, false, false},
}
