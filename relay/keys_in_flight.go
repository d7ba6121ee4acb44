package relay

import (
	"strings"
	"unicode/utf8"
)

// keyInFlightBytesMax is the longest key keysInFlight names, and
// keysInFlightBytesMax the most bytes of all the names: the keys are a
// hint (partitioned mode's claim looks any other key up instead; ordered
// mode's leaves any other key's rows to wait for their settle), so that a
// producer's long keys, or many, cannot make every claim carry them.
const (
	keyInFlightBytesMax  = 256
	keysInFlightBytesMax = 64 << 10
)

// keysInFlight returns the keys of the rows the relay holds (its chains'
// Keys) as a JSON object whose names are the keys, each 0 (the
// @keys_in_flight of queryBucketsClaim and of queryHeadsClaim), passed as
// text: a []byte goes as bytea where pgx runs a statement in the simple
// protocol. A key is written
// as its bytes, with " and \ escaped and nothing else: an escape \uXXXX
// above ASCII is refused by a database whose encoding is not UTF-8, which
// would fail the claim. Keys that are not valid UTF-8 or hold a control
// character (no producer writes them through the insert guard), longer than
// keyInFlightBytesMax, or past keysInFlightBytesMax are left out.
func keysInFlight(keys []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for _, k := range keys {
		if len(k) > keyInFlightBytesMax || !utf8.ValidString(k) || strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 }) {
			continue
		}
		if b.Len()+2*len(k)+6 > keysInFlightBytesMax {
			break
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for i := 0; i < len(k); i++ {
			if k[i] == '"' || k[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(k[i])
		}
		b.WriteString(`":0`)
	}
	b.WriteByte('}')
	return b.String()
}
