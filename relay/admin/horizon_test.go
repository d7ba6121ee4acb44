package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testkit/dbtest"
	"github.com/outbox-relay/outbox-relay/relay/admin"
)

// Status names the transactions holding back vacuum, oldest xmin first,
// with what an operator needs to end them: a REPEATABLE READ session left
// idle in its transaction is listed with its pid, application, state and
// age. The test has a database of its own, so that other tests' sessions
// do not come first.
func TestStatus_NamesWhoHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewInOwnDatabase(t)
	url := db.URL
	a, err := admin.New(db.Pool, db.Name)
	if err != nil {
		t.Fatal(err)
	}

	st, err := a.Status(ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Horizon.SeesAllSessions || st.Horizon.Oldest() != nil && *st.Horizon.Oldest().AgeSeconds > 1 {
		t.Errorf("before any snapshot is held: horizon %+v", st.Horizon)
	}

	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "nightly-report"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	begun := time.Now()
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT count(*) FROM outbox.messages"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the age the test measures

	// The age is read when Status asks, not when it returns: on a loaded
	// machine the call itself may take a while.
	heldBefore := time.Since(begun)
	st, err = a.Status(ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldest := st.Horizon.Oldest()
	if oldest == nil || oldest.PID == nil || *oldest.PID != int32(holder.PgConn().PID()) {
		t.Fatalf("the oldest holder is %+v, want the session of pid %d; holders %+v", oldest, holder.PgConn().PID(), st.Horizon.Holders)
	}
	if oldest.Holder != "session" || oldest.ApplicationName != "nightly-report" || oldest.State != "idle in transaction" ||
		*oldest.AgeSeconds < heldBefore.Seconds()-0.5 || *oldest.AgeSeconds > time.Since(begun).Seconds()+0.5 || oldest.User == "" {
		t.Errorf("oldest holder %+v (age %.2fs), want the session nightly-report, idle in transaction, held %s to %s", oldest, *oldest.AgeSeconds, heldBefore, time.Since(begun))
	}
	if st.Horizon.Holders[0].PID == nil || *st.Horizon.Holders[0].PID != *oldest.PID {
		t.Errorf("holders %+v: the oldest xmin comes first", st.Horizon.Holders)
	}

	// Horizon reads the same listing alone.
	hs, err := a.Horizon(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := hs.Oldest(); !hs.SeesAllSessions || o == nil || o.PID == nil || *o.PID != *oldest.PID || o.ApplicationName != "nightly-report" {
		t.Errorf("Horizon: oldest %+v, sees all %v; want the session of pid %d", o, hs.SeesAllSessions, *oldest.PID)
	}
}
