package kafka_test

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/kafkatest"
	"github.com/outbox-relay/outbox-relay/sinks/sinktest"
)

// javaMurmur2 is org.apache.kafka.common.utils.Utils.murmur2, line for
// line, on Java's signed 32-bit ints.
func javaMurmur2(data []byte) int32 {
	length := int32(len(data))
	const seed = int32(-1756908916) // 0x9747b28c
	const m = int32(0x5bd1e995)
	const r = 24
	h := seed ^ length
	length4 := length / 4
	for i := int32(0); i < length4; i++ {
		i4 := i * 4
		k := int32(data[i4+0]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= int32(data[(length&^3)+2]) << 16
		fallthrough
	case 2:
		h ^= int32(data[(length&^3)+1]) << 8
		fallthrough
	case 1:
		h ^= int32(data[length&^3])
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

// javaPartition is the partition the Java producer's default partitioner
// picks for a keyed record: toPositive(murmur2(key)) % numPartitions.
func javaPartition(key string, partitions int32) int32 {
	return (javaMurmur2([]byte(key)) & 0x7fffffff) % partitions
}

func TestJavaMurmur2_MatchesKafkasVectors(t *testing.T) {
	// Kafka's UtilsTest.testMurmur2.
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := javaMurmur2([]byte(in)); got != want {
			t.Errorf("javaMurmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestSink_KeyPicksThePartitionAsJavaDoes(t *testing.T) {
	t.Parallel()
	const partitions = 7
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, partitions)
	s := newSink(t, c, nil)

	// Three rounds of the same keys, in separate batches, as the relay
	// sends the messages of one key one after the other.
	const keys = 40
	var all = sinktest.Messages(t, 3*keys)
	for round := range 3 {
		msgs := all[round*keys : (round+1)*keys]
		for i := range msgs {
			msgs[i].Key = fmt.Sprintf("order-%d", i)
		}
		for i, err := range deliver(t, s, msgs) {
			if err != nil {
				t.Fatalf("round %d, message %d: %v", round, i, err)
			}
		}
	}
	got := waitRecords(t, c, all)
	used := map[int32]bool{}
	for _, m := range all {
		r := got[m.IdempotencyKey][0]
		if string(r.Key) != m.Key {
			t.Errorf("%s: record key %q, want %q", m.IdempotencyKey, r.Key, m.Key)
		}
		if want := javaPartition(m.Key, partitions); r.Partition != want {
			t.Errorf("key %s went to partition %d; the Java client picks %d", m.Key, r.Partition, want)
		}
		used[r.Partition] = true
	}
	if len(used) < partitions/2 {
		t.Errorf("%d keys used only %d of %d partitions", keys, len(used), partitions)
	}
}

func TestSink_KeyOrderHoldsWithinItsPartition(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, topic, 5)
	s := newSink(t, c, nil)
	msgs := sinktest.Messages(t, 60)
	for i := range msgs {
		msgs[i].Key = fmt.Sprintf("order-%d", i%3)
		// One message per key at a time, as the relay sends them in
		// ordered mode.
		for j, err := range deliver(t, s, msgs[i:i+1]) {
			if err != nil {
				t.Fatalf("message %d: %v", i+j, err)
			}
		}
	}
	waitRecords(t, c, msgs)
	seq := map[string]int{}
	for i, m := range msgs {
		seq[m.IdempotencyKey] = i
	}
	last := map[string]int{}
	for _, r := range c.Records(t, topic) {
		i := seq[header(r, "Idempotency-Key")]
		if prev, ok := last[string(r.Key)]; ok && i < prev {
			t.Errorf("key %s: message %d stored after message %d", r.Key, i, prev)
		}
		last[string(r.Key)] = i
	}
}
