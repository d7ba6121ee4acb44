package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/testkit/sqstest"
	sqssink "github.com/outbox-relay/outbox-relay/sinks/sqs"
)

// TestProcess_SinksWorkedExamples runs docs/sinks.md's worked examples
// from nothing to an event, as a user copies them: the relay's settings,
// the producer's INSERT and what the user is told to see are read from the
// page's shell blocks, and only what points at the user's machine (the
// servers' addresses, the database, the schema) is replaced by the test's
// own. A change to a sink or to the page that would leave a reader of the
// page without the event fails here.
func TestProcess_SinksWorkedExamples(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		block := exampleBlock(t, "Redis Streams", "A worked example")
		srv := redistest.Start(t)
		acl := shellWords(lineWith(t, block, "ACL SETUSER"))
		args := []any{}
		for _, w := range acl[1:] { // after redis-cli
			args = append(args, w)
		}
		srv.Do(t, args...)

		db := dbtest.New(t)
		env := exampleEnv(t, block, map[string]string{"127.0.0.1:6379": strings.TrimPrefix(srv.URL(), "redis://")}, db)
		p := startProcess(t, env...)
		p.waitLog("connected to Redis")
		db.Exec(t, exampleInsert(t, block))
		relaytest.WaitDrained(t, db, 30*time.Second)

		stream := shellWords(lineWith(t, block, "XRANGE"))[2]
		entries := srv.Entries(t, stream)
		if len(entries) != 1 {
			t.Fatalf("stream %s holds %d entries, want the example's one", stream, len(entries))
		}
		// The page shows redis-cli's reply: the entry's id, then its
		// fields as numbered name and value pairs.
		shown := quotedReplies(t, block[strings.Index(block, "XRANGE"):])
		if len(shown) < 3 || len(shown)%2 != 1 {
			t.Fatalf("the example's XRANGE reply is not an id and pairs of fields: %q", shown)
		}
		e := entries[0]
		for i := 1; i+1 < len(shown); i += 2 {
			name, want := shown[i], shown[i+1]
			got, ok := e.Field(name)
			switch {
			case !ok:
				t.Errorf("the entry has no field %q, which the page shows", name)
			case strings.HasSuffix(want, "…"):
				if got == "" {
					t.Errorf("field %q is empty", name)
				}
			case got != want:
				t.Errorf("field %q = %q, the page shows %q", name, got, want)
			}
		}
		if len(e.Fields) != (len(shown)-1)/2 {
			t.Errorf("the entry has %d fields, the page shows %d: %q", len(e.Fields), (len(shown)-1)/2, e.Fields)
		}
	})

	t.Run("sqs-fifo", func(t *testing.T) {
		t.Parallel()
		block := exampleBlock(t, "Amazon SQS", "From nothing to a message in a FIFO queue")
		srv := sqstest.Start(t)
		endpoint := strings.TrimPrefix(srv.Endpoint(), "http://")
		create := shellWords(lineWith(t, block, "create-queue"))
		name := create[indexOf(t, create, "--queue-name")+1]
		u := srv.CreateQueue(t, name, nil)
		shownURL := regexp.MustCompile(`"QueueUrl": "([^"]+)"`).FindStringSubmatch(block)
		// fauxqs names a queue sqs.REGION.HOST:PORT: localhost by default,
		// the test's emulator 127.0.0.1.
		if shownURL == nil || strings.Replace(shownURL[1], "localhost:4566", endpoint, 1) != u {
			t.Fatalf("the page shows the queue's URL as %q; the emulator made %s", shownURL, u)
		}

		db := dbtest.New(t)
		env := exampleEnv(t, block, map[string]string{"127.0.0.1:4566": endpoint, "localhost:4566": endpoint}, db)
		env = append(env, "AWS_EC2_METADATA_DISABLED=true") // no instance to ask on a test machine
		startProcess(t, env...)
		db.Exec(t, exampleInsert(t, block))
		relaytest.WaitDrained(t, db, 30*time.Second)
		archived := relaytest.Archive(t, db, "true")
		if len(archived) != 1 {
			t.Fatalf("archive holds %d delivered rows, want the example's one", len(archived))
		}
		var idem string
		for k := range archived {
			idem = k
		}

		msgs := srv.Received(t, u)
		if len(msgs) != 1 {
			t.Fatalf("queue %s holds %d messages, want the example's one", name, len(msgs))
		}
		m := msgs[0]
		said := regexp.MustCompile(`# Body: (.*?); MessageGroupId: (\S+);`).FindStringSubmatch(block)
		if said == nil {
			t.Fatal("the example no longer says what arrives (# Body: …; MessageGroupId: …;)")
		}
		if got := aws.ToString(m.Body); got != said[1] {
			t.Errorf("body %q, the page shows %q", got, said[1])
		}
		if got := m.Attributes["MessageGroupId"]; got != said[2] {
			t.Errorf("MessageGroupId %q, the page shows %q", got, said[2])
		}
		if got := m.Attributes["MessageDeduplicationId"]; got != idem {
			t.Errorf("MessageDeduplicationId %q, want the row's idempotency key %q", got, idem)
		}
		if got := aws.ToString(m.MessageAttributes[sqssink.IdempotencyKeyAttribute].StringValue); got != idem {
			t.Errorf("attribute %s = %q, want %q", sqssink.IdempotencyKeyAttribute, got, idem)
		}
		if got := aws.ToString(m.MessageAttributes[sqssink.TopicAttribute].StringValue); got == "" || !strings.Contains(block, sqssink.TopicAttribute+"="+got) {
			t.Errorf("attribute %s = %q, which the page does not show", sqssink.TopicAttribute, got)
		}
		tp := regexp.MustCompile(`traceparent\\": \\"([0-9a-f-]+)\\"`).FindStringSubmatch(block)
		if tp == nil {
			t.Fatal("the example's INSERT carries no traceparent")
		}
		if got := aws.ToString(m.MessageAttributes["traceparent"].StringValue); got != tp[1] {
			t.Errorf("attribute traceparent = %q, want the row's %q", got, tp[1])
		}
	})
}

// exampleBlock returns the first ```sh block of docs/sinks.md's section
// title after the text marker.
func exampleBlock(t *testing.T, title, marker string) string {
	t.Helper()
	section := docSection(t, "docs/sinks.md", title)
	_, after, ok := strings.Cut(section, marker)
	if !ok {
		t.Fatalf("docs/sinks.md's %s section no longer has %q", title, marker)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("docs/sinks.md's %s section has no shell block after %q", title, marker)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// shellLines returns block's commands with their continuation lines
// joined and comments kept as lines of their own.
func shellLines(block string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(block, "\n") {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// lineWith returns the command of block that holds s.
func lineWith(t *testing.T, block, s string) string {
	t.Helper()
	for _, l := range shellLines(block) {
		if strings.Contains(l, s) && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			return l
		}
	}
	t.Fatalf("the example has no command with %q:\n%s", s, block)
	return ""
}

// shellWords splits a command into its words as a shell would for the
// quoting the examples use (single and double quotes, no expansions),
// stopping at a comment or a trailing &.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '#' && !in, r == '&' && !in:
			return words
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// exampleEnv returns the environment of the example's relay: the
// variables the block exports and those set on its `outbox-relay run`
// command, with each address of hosts replaced by the test's, and
// DATABASE_URL the test's database with RELAY_SCHEMA its schema.
func exampleEnv(t *testing.T, block string, hosts map[string]string, db *dbtest.Schema) []string {
	t.Helper()
	var env []string
	for _, l := range shellLines(block) {
		words := shellWords(l)
		switch {
		case len(words) > 0 && words[0] == "export":
			env = append(env, words[1:]...)
		case strings.Contains(l, "outbox-relay run"):
			for _, w := range words {
				if w == "outbox-relay" {
					break
				}
				env = append(env, w)
			}
		}
	}
	if len(env) == 0 {
		t.Fatalf("the example sets no variable for outbox-relay run:\n%s", block)
	}
	sawDB := false
	for i, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("the example's relay has %q, not a variable", kv)
		}
		if name == "DATABASE_URL" {
			env[i], sawDB = "DATABASE_URL="+db.URL, true
			continue
		}
		for from, to := range hosts {
			value = strings.ReplaceAll(value, from, to)
		}
		env[i] = name + "=" + value
	}
	if !sawDB {
		t.Fatal("the example's relay has no DATABASE_URL")
	}
	return append(env, "RELAY_SCHEMA="+db.Name)
}

// exampleInsert returns the example's psql -c statement, its table in the
// test's schema (as db.Exec formats it).
func exampleInsert(t *testing.T, block string) string {
	t.Helper()
	_, rest, ok := strings.Cut(block, `-c "`)
	if !ok {
		t.Fatalf("the example has no psql -c statement:\n%s", block)
	}
	var sql strings.Builder
	for i := 0; i < len(rest); i++ {
		switch {
		case rest[i] == '\\' && i+1 < len(rest):
			i++
			sql.WriteByte(rest[i])
		case rest[i] == '"':
			stmt := sql.String()
			if !strings.Contains(stmt, "INSERT INTO outbox.messages") {
				t.Fatalf("the example's statement is not an INSERT into outbox.messages: %s", stmt)
			}
			return strings.Replace(stmt, "outbox.messages", "%s.messages", 1)
		default:
			sql.WriteByte(rest[i])
		}
	}
	t.Fatalf("the example's psql -c statement does not end")
	return ""
}

// quotedReplies returns the quoted values of redis-cli's numbered reply
// lines (# 1) "…") in text, unescaped.
func quotedReplies(t *testing.T, text string) []string {
	t.Helper()
	var out []string
	re := regexp.MustCompile(`\d+\) "((?:[^"\\]|\\.)*)"`)
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(l, -1) {
			out = append(out, strings.ReplaceAll(m[1], `\"`, `"`))
		}
	}
	return out
}

// indexOf returns the index of s in words.
func indexOf(t *testing.T, words []string, s string) int {
	t.Helper()
	for i, w := range words {
		if w == s {
			return i
		}
	}
	t.Fatalf("%q not in %q", s, words)
	return -1
}
