package nats

import (
	"errors"
	"fmt"
	"strings"
)

// ValidateSubject reports whether subject can be published to: non-empty,
// no whitespace or control characters, no empty tokens (leading, trailing or
// doubled dots), no wildcard tokens, and not on NATS's control plane:
// subjects starting with $ ($JS.API, $KV, $O, $SYS: JetStream's and the
// server's APIs) or _INBOX (replies to requests) are refused, so that a row
// can never delete a stream, purge a bucket or answer someone's request.
func ValidateSubject(subject string) error {
	if subject == "" {
		return errors.New("invalid NATS subject: empty")
	}
	if strings.HasPrefix(subject, "$") || strings.HasPrefix(subject, "_INBOX.") || subject == "_INBOX" {
		return fmt.Errorf("NATS subject %q is on the control plane ($… APIs, _INBOX replies): the relay never publishes there", subject)
	}
	for _, r := range subject {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("invalid NATS subject %q: contains whitespace or a control character", subject)
		}
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return fmt.Errorf("invalid NATS subject %q: empty token", subject)
		case "*", ">":
			return fmt.Errorf("invalid NATS subject %q: wildcards cannot be published to", subject)
		}
	}
	return nil
}
