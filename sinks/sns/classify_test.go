package sns

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// TestRequestErrorClasses: a whole PublishBatch that fails, as SNS
// documents its errors (fauxqs never throttles nor checks credentials).
func TestRequestErrorClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err                   error
		permanent, retryAfter bool
	}{
		{&types.NotFoundException{Message: aws.String("gone")}, true, false},
		{&smithy.GenericAPIError{Code: "NotFound"}, true, false},
		{&types.ThrottledException{}, false, true},
		{&smithy.GenericAPIError{Code: "Throttling"}, false, true},
		{&types.KMSThrottlingException{}, false, true},
		{&smithy.GenericAPIError{Code: "InvalidClientTokenId"}, false, false},
		{&types.AuthorizationErrorException{}, false, false},
		{&types.KMSAccessDeniedException{}, false, false},
		{&types.InternalErrorException{}, false, false},
		{errors.New("dial tcp: connection refused"), false, false},
	} {
		err := requestError("t", c.err)
		_, retryAfter := sinks.RetryDelay(err)
		if sinks.IsPermanent(err) != c.permanent || retryAfter != c.retryAfter {
			t.Errorf("%v: permanent %v, retry-after %v; want %v, %v", c.err, sinks.IsPermanent(err), retryAfter, c.permanent, c.retryAfter)
		}
	}
}

// entryErrorCases are PublishBatch's per-entry failures as SNS documents
// them (fauxqs never throttles nor checks KMS).
var entryErrorCases = []struct {
	entry                 types.BatchResultErrorEntry
	permanent, retryAfter bool
}{
	{types.BatchResultErrorEntry{Code: aws.String("InvalidParameter"), SenderFault: true}, true, false},
	{types.BatchResultErrorEntry{Code: aws.String("ParameterValueInvalid"), SenderFault: true}, true, false},
	{types.BatchResultErrorEntry{Code: aws.String("NotFound"), SenderFault: true}, true, false},
	{types.BatchResultErrorEntry{Code: aws.String("Throttled"), SenderFault: true}, false, true},
	{types.BatchResultErrorEntry{Code: aws.String("KMSThrottling"), SenderFault: true}, false, true},
	{types.BatchResultErrorEntry{Code: aws.String("KMSAccessDenied"), SenderFault: true}, false, false},
	{types.BatchResultErrorEntry{Code: aws.String("AuthorizationError"), SenderFault: true}, false, false},
	{types.BatchResultErrorEntry{Code: aws.String("InternalError"), SenderFault: false}, false, false},
}
