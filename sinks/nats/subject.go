package nats

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/sinks"
)

// SubjectBytesMax is the longest subject the sink publishes to, in bytes.
// nats-server closes the connection (not only the publish) on a protocol
// line longer than its max_control_line, 4 KiB by default, and the line
// carries the subject with the reply inbox and the sizes: a longer subject
// would take the connection down for every row. 1 KiB leaves room for the
// rest on any server that did not lower max_control_line below 2 KiB, and
// holds NATS_SUBJECT_PREFIX (at most SubjectPrefixBytesMax) with any topic
// the table takes (outbox.TopicBytesMax).
const SubjectBytesMax = 1024

// SubjectPrefixBytesMax is the longest NATS_SUBJECT_PREFIX, in bytes.
const SubjectPrefixBytesMax = 512

// ValidateSubject reports whether subject can be published to: at most
// SubjectBytesMax bytes, non-empty, no whitespace or control characters, no empty tokens (leading, trailing or
// doubled dots), no wildcard tokens, and not on NATS's control plane:
// subjects starting with $ ($JS.API, $KV, $O, $SYS: JetStream's and the
// server's APIs) or _INBOX (replies to requests) are refused, so that a row
// can never delete a stream, purge a bucket or answer someone's request.
func ValidateSubject(subject string) error {
	if subject == "" {
		return errors.New("invalid NATS subject: empty")
	}
	if len(subject) > SubjectBytesMax {
		return &sinks.LimitError{What: "subject", Size: int64(len(subject)), Limit: "the relay's limit on a NATS subject (a longer protocol line closes the connection)", Max: SubjectBytesMax}
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
