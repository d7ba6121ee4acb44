package admin

import (
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testkit/golden"
	"github.com/outbox-relay/outbox-relay/relay/internal/horizon"
)

// goldenStatements returns every statement the operations run, rendered
// for the schema "outbox", by the name of its golden file.
func goldenStatements() map[string]string {
	q := renderQueries("outbox")
	return map[string]string{
		"relay_mode":                q.relayMode,
		"messages_status":           q.messagesStatus,
		"backoff_by_error":          q.backoffByError,
		"delivered_per_minute":      q.deliveredPerMinute,
		"relays_status":             q.relaysStatus,
		"blocked_keys":              q.blockedKeys,
		"messages_leases":           q.messagesLeases,
		"bucket_owners":             q.bucketOwners,
		"dead_letters_by_reason":    q.deadLettersByReason,
		"dead_letters_summary":      q.deadLettersSummary,
		"tables_status":             q.tablesStatus,
		"generations":               q.generations,
		"archive_count_exact":       q.archiveCountExact,
		"dead_letters_groups":       q.deadLettersGroups,
		"dead_letter_detail":        q.deadLetterDetail,
		"key_history":               q.keyHistory,
		"dead_letters_list":         q.deadLettersList,
		"dead_letters_retry":        q.deadLettersRetry,
		"dead_letters_retry_judged": q.deadLettersRetryJudged,
		"dead_letters_retry_dry":    q.deadLettersRetryDry,
		"dead_letters_purge":        q.deadLettersPurge,
		"dead_letters_purge_dry":    q.deadLettersPurgeDry,
		"archive_replay":            q.archiveReplay,
		"archive_replay_dry":        q.archiveReplayDry,
		"messages_cancel":           q.messagesCancel,
		"messages_cancel_dry":       q.messagesCancelDry,
		"keys_promote":              q.keysPromote,
		"rotation_shared":           q.rotationShared,
		"horizon_holders":           horizon.Statements()["horizon_holders"],
		"horizon_read_all_stats":    horizon.Statements()["read_all_stats"],
	}
}

// TestGoldenSQL renders every statement the operations run, for the schema
// "outbox", and compares it with testdata/<statement>.sql: a reviewer reads
// and diffs the final SQL there (the holders of the xmin horizon are
// relay/internal/horizon's, whose own golden files hold them too). go test
// ./relay/admin -run TestGoldenSQL -update rewrites the files; a stale file
// fails.
func TestGoldenSQL(t *testing.T) {
	golden.SQL(t, "testdata", "./relay/admin", "the operations", goldenStatements())
}

// Every statement is rendered: no slot is left, and every field of
// queries holds one of the golden statements.
func TestGoldenSQL_CoversEveryStatement(t *testing.T) {
	golden := map[string]bool{}
	for _, sql := range goldenStatements() {
		golden[sql] = true
		if strings.Contains(sql, "{schema}") || strings.Contains(sql, "%[1]s") || strings.Contains(sql, "$1") {
			t.Errorf("a statement is left unrendered or with positional arguments:\n%s", sql)
		}
	}
	if n, fields := len(golden)-2, reflect.TypeFor[queries]().NumField(); n != fields {
		t.Errorf("%d golden statements of this package, %d in queries: name the new ones in goldenStatements", n, fields)
	}
}
