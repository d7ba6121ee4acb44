package nats

import (
	"errors"
	"fmt"
	"strings"
)

// ValidateSubject reports whether subject can be published to: non-empty,
// no whitespace or control characters, no empty tokens (leading, trailing or
// doubled dots) and no wildcard tokens.
func ValidateSubject(subject string) error {
	if subject == "" {
		return errors.New("invalid NATS subject: empty")
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
