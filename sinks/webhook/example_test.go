package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/sinks"
	"github.com/outbox-relay/outbox-relay/sinks/webhook"
)

// verify is what a receiver does with the standard library alone
// (docs/sinks.md shows it, TestDocs_VerifyIsTheTestedOne keeps the two
// identical): check the timestamp, recompute the signature with its
// secret and compare it with each one sent.
func verify(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return errors.New("missing or stale webhook-timestamp")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("no valid signature")
}

func Example_verify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verify(secret, r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// Drop webhook-id values already processed, then handle the event.
		fmt.Printf("verified %s %s: %s\n", r.Header.Get("Outbox-Topic"), r.Header.Get("webhook-id"), body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	secrets, err := webhook.ParseSecrets(secret)
	if err != nil {
		panic(err)
	}
	sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: secrets})
	if err != nil {
		panic(err)
	}
	defer sink.Close()
	errs := sink.Deliver(context.Background(), []sinks.Message{{Message: outbox.Message{
		Topic:          "orders.paid",
		Payload:        []byte(`{"order_id": 42}`),
		IdempotencyKey: "order-42-paid",
	}}})
	fmt.Println("outcome:", errs[0])
	// Output:
	// verified orders.paid order-42-paid: {"order_id": 42}
	// outcome: <nil>
}

func TestDocs_VerifyIsTheTestedOne(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/sinks.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func verify(")
	end := start + strings.Index(s[start:], "\n}\n") + len("\n}\n")
	if !strings.Contains(string(doc), "```go\n"+s[start:end]+"```\n") {
		t.Error("docs/sinks.md does not show verify exactly as example_test.go has it: copy it into the Webhooks section")
	}
}
