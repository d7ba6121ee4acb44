package floor

import "testing"

// TestNew_PanicsWithoutALease: a refresher without a lease would refresh
// without a timeout, a bug of the caller's.
func TestNew_PanicsWithoutALease(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with no lease did not panic")
		}
	}()
	New(Config{})
}
