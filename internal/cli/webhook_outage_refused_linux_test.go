package cli

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/webhooktest"
)

// refusingPort returns the address of a port on 127.0.0.1 that refuses
// every connection: bound but not listening, so that it stays the test's
// all along (a closed port may be taken by a parallel test's server), and
// a function that starts listening on it.
func refusingPort(t *testing.T) (addr string, listen func() net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	f := os.NewFile(uintptr(fd), "refusing port")
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	return addr, func() net.Listener {
		if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
			t.Fatalf("listen: %v", err)
		}
		l, err := net.FileListener(f)
		if err != nil {
			t.Fatalf("listener: %v", err)
		}
		return l
	}
}

func TestProcess_WebhookOutageOfRefusedConnectionsSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rcv := webhooktest.NewReceiver(t)
	addr, listen := refusingPort(t)
	endureOutage(t, db, rcv, outage{
		url: "http://" + addr + webhooktest.Path,
		// Five refused connections in a row open the circuit breaker.
		opening: 5,
		end: func() {
			srv := &httptest.Server{Listener: listen(), Config: &http.Server{Handler: rcv}}
			srv.Start()
			t.Cleanup(srv.Close)
		},
	})
}
