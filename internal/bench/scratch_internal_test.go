package bench

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestStoreNotCreated: only the server's failure to create a stream's
// store is tried again, not another creation error.
func TestStoreNotCreated(t *testing.T) {
	store := &jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}
	other := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("wrapped: %w", store), true},
		{other, false},
		{errors.New("error creating store for stream"), false},
	} {
		if got := storeNotCreated(c.err); got != c.want {
			t.Errorf("storeNotCreated(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
