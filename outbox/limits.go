package outbox

// The most bytes of each column a producer writes that the table takes
// (the insert guard refuses a larger value in the producer's own
// transaction) and that a relay reads when it claims the row: a row that
// holds more (written before the guard existed, or with triggers off) is
// dead-lettered without its value being read, with the part and the
// limit named. The payload's limit is the relay's in-flight byte budget
// (RELAY_MAX_IN_FLIGHT_BYTES) instead, read the same way.
//
// Lengths count bytes, as brokers do, not characters.
const (
	// TopicBytesMax bounds the topic: every sink can carry 255 bytes
	// (RabbitMQ's routing key is a short string of at most 255, Kafka's
	// topic names at most 249 characters, NATS subjects go on a protocol
	// line of 4 KiB with the reply inbox and the sizes).
	TopicBytesMax = 255
	// KeyBytesMax bounds the ordering key: 1,000 characters of at most
	// four bytes.
	KeyBytesMax = 4000
	// IdempotencyKeyBytesMax bounds the idempotency key: 200 characters
	// of at most four bytes.
	IdempotencyKeyBytesMax = 800
	// DestinationBytesMax bounds the destination, a sink's name.
	DestinationBytesMax = 255
	// HeadersBytesMax bounds the headers, as JSON text.
	HeadersBytesMax = 16384
)
