package examples_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
)

// docs/writing-rows.md shows the outbox INSERT in every language (and the
// README the psql one), and examples/ holds a runnable program for each.
// These tests keep the two byte-identical (after normalizeSQL) and run every
// statement against a real, migrated schema.

// example is one language's outbox INSERT: where it is shown, how its
// placeholders are written, and the parameters the example passes.
type example struct {
	lang   string // the info string of the docs' code block
	file   string // relative to examples/
	params []any  // in placeholder order; nil for literal SQL
}

// The parameters every example passes (the docs' values).
var (
	examplePayload = []byte(`{"order_id": 42}`)
	exampleHeaders = `{"content-type": "application/json"}`
	exampleParams  = []any{"orders.paid", examplePayload, "order-42", exampleHeaders, "order-42-paid"}
)

var examples = []example{
	{lang: "sql", file: "psql/insert.sql"},
	{lang: "python", file: "python/insert.py", params: exampleParams},
	{lang: "js", file: "node/insert.js", params: exampleParams},
	{lang: "java", file: "java/Insert.java", params: exampleParams},
}

// normalizeSQL is the comparison the tests make: runs of whitespace
// (including line breaks and the indentation of continued string literals)
// count as one space, and leading and trailing whitespace is ignored.
// Everything else must match byte for byte.
func normalizeSQL(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

const insertPrefix = "INSERT INTO outbox.messages"

// extractInsert returns the outbox INSERT statement in src, written in lang.
// For SQL it is the text from INSERT INTO outbox.messages to the next
// semicolon. In Python, JavaScript and Java it is the string literal that
// starts with INSERT INTO outbox.messages joined with the literals that
// continue it (adjacent in Python, joined with + in JavaScript and Java).
func extractInsert(lang, src string) (string, error) {
	i := strings.Index(src, insertPrefix)
	if i < 0 {
		return "", fmt.Errorf("no %q", insertPrefix)
	}
	if strings.Contains(src[i+len(insertPrefix):], insertPrefix) {
		return "", fmt.Errorf("%q more than once", insertPrefix)
	}
	if lang == "sql" {
		end := strings.IndexByte(src[i:], ';')
		if end < 0 {
			return "", fmt.Errorf("no semicolon after %q", insertPrefix)
		}
		return src[i : i+end], nil
	}
	if i == 0 || (src[i-1] != '"' && src[i-1] != '\'') {
		return "", fmt.Errorf("%q does not start a string literal", insertPrefix)
	}
	var stmt strings.Builder
	pos := i - 1
	for {
		quote := src[pos]
		end := strings.IndexByte(src[pos+1:], quote)
		if end < 0 {
			return "", fmt.Errorf("unterminated string literal at byte %d", pos)
		}
		lit := src[pos+1 : pos+1+end]
		if strings.ContainsAny(lit, "\\\n") {
			return "", fmt.Errorf("string literal %q has an escape or a line break, which this test does not read", lit)
		}
		stmt.WriteString(lit)
		pos += end + 2
		// A continuation: whitespace, at most one +, whitespace, a quote.
		rest := strings.TrimLeft(src[pos:], " \t\r\n")
		if lang != "python" && strings.HasPrefix(rest, "+") {
			rest = strings.TrimLeft(rest[1:], " \t\r\n")
		}
		if rest == "" || (rest[0] != '"' && rest[0] != '\'') {
			return stmt.String(), nil
		}
		pos = len(src) - len(rest)
	}
}

// The page and the section that show the INSERT in every language.
const (
	rowsPage    = "docs/writing-rows.md"
	rowsSection = "## Examples in each language"
)

// docBlocks returns the fenced code blocks of file (relative to the
// repository) by info string: those of its section that starts with the
// heading line, up to the next heading of that level, or of the whole file
// when heading is empty.
func docBlocks(t *testing.T, file, heading string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../" + file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if heading != "" {
		start := strings.Index(s, "\n"+heading+"\n")
		if start < 0 {
			t.Fatalf("%s has no %q section", file, heading)
		}
		s = s[start+1:]
		level := heading[:strings.IndexByte(heading, ' ')+1]
		if end := strings.Index(s[len(heading):], "\n"+level); end >= 0 {
			s = s[:len(heading)+end]
		}
	}
	blocks := map[string][]string{}
	fence := regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")
	for _, m := range fence.FindAllStringSubmatch(s, -1) {
		blocks[m[1]] = append(blocks[m[1]], m[2])
	}
	return blocks
}

func TestExamples_StatementsMatchTheDocs(t *testing.T) {
	blocks := docBlocks(t, rowsPage, rowsSection)
	stmts := map[string]string{}
	for _, ex := range examples {
		src, err := os.ReadFile(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := extractInsert(ex.lang, string(src))
		if err != nil {
			t.Errorf("%s: %v", ex.file, err)
			continue
		}
		var want string
		for _, b := range blocks[ex.lang] {
			if strings.Contains(b, insertPrefix) {
				if want, err = extractInsert(ex.lang, b); err != nil {
					t.Errorf("%s, %s block: %v", rowsPage, ex.lang, err)
				}
			}
		}
		if want == "" {
			t.Errorf("%s's %q section has no %s block with %q", rowsPage, rowsSection, ex.lang, insertPrefix)
			continue
		}
		if normalizeSQL(got) != normalizeSQL(want) {
			t.Errorf("%s's statement differs from %s's %s block:\n got: %s\nwant: %s", ex.file, rowsPage, ex.lang, normalizeSQL(got), normalizeSQL(want))
		}
		stmts[ex.lang] = normalizeSQL(got)
	}

	// Every language writes the same columns with the same conflict clause:
	// only the placeholders (and Java's ::jsonb cast) differ.
	placeholders := regexp.MustCompile(`%s|\$[0-9]+|\?(::jsonb)?`)
	var first string
	for _, lang := range []string{"python", "js", "java"} {
		s := placeholders.ReplaceAllString(stmts[lang], "?")
		if first == "" {
			first = s
		} else if s != first {
			t.Errorf("the %s statement writes differently from the python one:\n%s\n%s", lang, s, first)
		}
	}
	columns := stmts["sql"][:strings.Index(stmts["sql"], ")")+1]
	if !strings.HasPrefix(first, columns) || !strings.HasSuffix(stmts["sql"], "ON CONFLICT (idempotency_key) DO NOTHING") {
		t.Errorf("the psql statement %q and the others %q write different columns", stmts["sql"], first)
	}
}

// TestExamples_READMEStatementIsTheExample: the INSERT the README shows is
// examples/psql/insert.sql's.
func TestExamples_READMEStatementIsTheExample(t *testing.T) {
	src, err := os.ReadFile("psql/insert.sql")
	if err != nil {
		t.Fatal(err)
	}
	want, err := extractInsert("sql", string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range docBlocks(t, "README.md", "")["sql"] {
		if !strings.Contains(b, insertPrefix) {
			continue
		}
		got, err := extractInsert("sql", b)
		if err != nil {
			t.Errorf("README.md, sql block: %v", err)
			continue
		}
		if normalizeSQL(got) != normalizeSQL(want) {
			t.Errorf("README.md's statement differs from psql/insert.sql's:\n got: %s\nwant: %s", normalizeSQL(got), normalizeSQL(want))
		}
	}
}

// toPgx rewrites lang's placeholders as pgx's $n.
func toPgx(lang, stmt string) string {
	var p *regexp.Regexp
	switch lang {
	case "python":
		p = regexp.MustCompile(`%s`)
	case "java":
		p = regexp.MustCompile(`\?`)
	default:
		return stmt // SQL has none; JavaScript's pg uses $n already
	}
	n := 0
	return p.ReplaceAllStringFunc(stmt, func(string) string {
		n++
		return "$" + strconv.Itoa(n)
	})
}

func TestExamples_StatementsInsertOnceAndStoreTheRow(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.lang, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			src, err := os.ReadFile(ex.file)
			if err != nil {
				t.Fatal(err)
			}
			stmt, err := extractInsert(ex.lang, string(src))
			if err != nil {
				t.Fatal(err)
			}
			stmt = strings.Replace(toPgx(ex.lang, stmt), "outbox.messages", db.Table("messages"), 1)

			for i, want := range []int64{1, 0} { // the second insert hits ON CONFLICT
				tag, err := db.Pool.Exec(ctx, stmt, ex.params...)
				if err != nil {
					t.Fatalf("insert %d: %v\n%s", i+1, err, stmt)
				}
				if tag.RowsAffected() != want {
					t.Errorf("insert %d inserted %d rows, want %d", i+1, tag.RowsAffected(), want)
				}
			}

			var (
				topic, key, idempotencyKey string
				payload                    []byte
				headers                    map[string]string
			)
			err = db.Pool.QueryRow(ctx, "SELECT topic, key, idempotency_key, payload, headers FROM "+db.Table("messages")).
				Scan(&topic, &key, &idempotencyKey, &payload, &headers)
			if err != nil {
				t.Fatalf("read the one row: %v", err)
			}
			if topic != "orders.paid" || key != "order-42" || idempotencyKey != "order-42-paid" {
				t.Errorf("topic, key, idempotency_key = %q, %q, %q", topic, key, idempotencyKey)
			}
			if string(payload) != string(examplePayload) {
				t.Errorf("payload = %q, want %q", payload, examplePayload)
			}
			if len(headers) != 1 || headers["content-type"] != "application/json" {
				t.Errorf("headers = %v", headers)
			}
		})
	}
}

// The psql example runs whole, as psql would run it, in a test schema.
func TestExamples_PsqlFileRuns(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	src, err := os.ReadFile("psql/insert.sql")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(src), "outbox.messages", db.Table("messages"))
	conn := db.Conn(t)
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{db.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		// Without arguments, Exec sends the script as one simple query, as
		// psql -f does statement by statement.
		if _, err := conn.Exec(ctx, script); err != nil {
			t.Fatalf("run insert.sql: %v", err)
		}
	}
	var status string
	if err := conn.QueryRow(ctx, "SELECT status FROM orders WHERE id = 42").Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "paid" || db.Count(t, "messages") != 1 {
		t.Errorf("order 42 is %q and the outbox has %d rows; want paid and 1", status, db.Count(t, "messages"))
	}
}
