// Package awsids maps a row's key and idempotency key onto the ids Amazon
// SQS and SNS FIFO take: MessageGroupId and MessageDeduplicationId. Both
// are at most 128 characters of ASCII letters, digits and punctuation
// (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~), so every printable ASCII character
// but the space. The SQS and SNS sinks use it, so that one row gets the
// same ids whichever of them carries it.
//
// The mapping is deterministic and injective in practice: a value that
// fits (1 to 128 of those characters) and does not start with HashPrefix
// is kept as it is; any other value (longer, empty, with a space, a
// control or a non-ASCII character, or starting with HashPrefix) becomes
// HashPrefix followed by the lower-case hex SHA-256 of its bytes, 71
// characters. Two different values map to the same id only if SHA-256
// collides.
package awsids

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Max is the most characters SQS and SNS take in a MessageGroupId or a
// MessageDeduplicationId.
const Max = 128

// HashPrefix begins an id made by hashing a value that does not fit.
const HashPrefix = "sha256:"

// Fits reports whether s can be an id as it is: 1 to Max characters, each
// printable ASCII other than the space (letters, digits and punctuation).
func Fits(s string) bool {
	if s == "" || len(s) > Max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// ID returns the id of value: value itself when it fits and does not
// start with HashPrefix, else HashPrefix and value's SHA-256 in hex.
func ID(value string) string {
	if Fits(value) && !strings.HasPrefix(value, HashPrefix) {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// DeduplicationID returns the MessageDeduplicationId of a row with this
// idempotency key.
func DeduplicationID(idempotencyKey string) string { return ID(idempotencyKey) }

// GroupID returns the MessageGroupId of a row with this key (not empty).
func GroupID(key string) string { return ID(key) }

// FIFO returns a row's ids on a FIFO queue or topic: its key as the
// message group (unkeyed rows: defaultGroup, or when empty their own
// idempotency key, so that they do not wait for each other) and its
// idempotency key as the deduplication id.
func FIFO(key, idempotencyKey, defaultGroup string) (group, dedup string) {
	switch {
	case key != "":
		group = GroupID(key)
	case defaultGroup != "":
		group = GroupID(defaultGroup)
	default:
		group = GroupID(idempotencyKey)
	}
	return group, DeduplicationID(idempotencyKey)
}
