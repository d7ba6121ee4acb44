package sns

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/sinks/internal/awsmsg"
)

// TopicNameMax is the longest topic name SNS takes, ".fifo" included.
const TopicNameMax = 256

// FIFOSuffix ends the name of every FIFO topic.
const FIFOSuffix = ".fifo"

// TopicARN is an SNS topic's ARN, arn:PARTITION:sns:REGION:ACCOUNT:NAME,
// split. Name is "" for the prefix form, arn:PARTITION:sns:REGION:ACCOUNT:
// (ending in a colon), which sends each row to the topic its topic names.
type TopicARN struct {
	Partition, Region, Account, Name string
}

// ParseTopicARN splits an SNS topic ARN, or the prefix form ending in a
// colon after the account.
func ParseTopicARN(raw string) (TopicARN, error) {
	parts := strings.Split(raw, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sns" {
		return TopicARN{}, errors.New("not an SNS topic ARN like arn:aws:sns:eu-west-1:123456789012:orders.fifo, or arn:aws:sns:eu-west-1:123456789012: for a topic per row")
	}
	a := TopicARN{Partition: parts[1], Region: parts[3], Account: parts[4], Name: parts[5]}
	switch {
	case a.Partition == "":
		return TopicARN{}, errors.New("the ARN has no partition (aws, aws-cn, aws-us-gov)")
	case a.Region == "":
		return TopicARN{}, errors.New("the ARN has no region")
	case a.Account == "":
		return TopicARN{}, errors.New("the ARN has no account")
	}
	if a.Name != "" {
		if err := ValidateTopicName(a.Name); err != nil {
			return TopicARN{}, err
		}
	}
	return a, nil
}

// With returns the ARN of topic name in a's account and region.
func (a TopicARN) With(name string) string {
	return "arn:" + a.Partition + ":sns:" + a.Region + ":" + a.Account + ":" + name
}

// TopicName returns the name of the SNS topic a row of topic goes to under
// prefix: prefix and the topic with each '.' turned into '-', keeping a
// final ".fifo" (a FIFO topic). A name SNS cannot take (longer than 256
// characters, or with a character other than ASCII letters, digits, '-'
// and '_') is an error: the row is dead-lettered. Topics that differ only
// in '.' and '-' (orders.created, orders-created) name the same SNS topic.
func TopicName(prefix, topic string) (string, error) {
	base, suffix := topic, ""
	if strings.HasSuffix(topic, FIFOSuffix) {
		base, suffix = strings.TrimSuffix(topic, FIFOSuffix), FIFOSuffix
	}
	name := prefix + strings.ReplaceAll(base, ".", "-") + suffix
	if err := ValidateTopicName(name); err != nil {
		return "", err
	}
	return name, nil
}

// ValidateTopicName returns why SNS refuses name as a topic name, nil when
// it takes it.
func ValidateTopicName(name string) error {
	base := strings.TrimSuffix(name, FIFOSuffix)
	switch {
	case base == "":
		return errors.New("an SNS topic name needs at least one character before .fifo")
	case len(name) > TopicNameMax:
		return fmt.Errorf("the SNS topic name of %d characters is longer than %d", len(name), TopicNameMax)
	case !nameChars(base):
		return fmt.Errorf("SNS topic name %s has a character other than ASCII letters, digits, '-' and '_'", awsmsg.Clipped(name))
	}
	return nil
}

// ValidatePrefix returns why prefix cannot begin topic names.
func ValidatePrefix(prefix string) error {
	if len(prefix) > TopicNameMax-1 {
		return fmt.Errorf("longer than %d characters", TopicNameMax-1)
	}
	if !nameChars(prefix) {
		return errors.New("only ASCII letters, digits, '-' and '_' may name an SNS topic")
	}
	return nil
}

func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isFIFO reports whether the topic named name is a FIFO topic: SNS names
// every FIFO topic, and only those, with the suffix .fifo.
func isFIFO(name string) bool { return strings.HasSuffix(name, FIFOSuffix) }
