package dbtest

import (
	"context"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A schema and a role recorded by a test process that is gone (a run
// interrupted before its cleanups) are dropped by the next sweep; those of
// a process still running are kept.
func TestSweep_DropsWhatAGoneProcessLeftBehind(t *testing.T) {
	ctx := context.Background()
	conn, err := connect(ctx, URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sweep(conn) // creates the registry

	// A process that has exited: its id is free (or reused, which the
	// sweep would take for running: then the objects are kept, a leak,
	// never a loss).
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	me := thisProcess()
	left, kept := schemaName(t.Name()+"_left"), schemaName(t.Name()+"_kept")
	role := schemaName(t.Name() + "_role")
	for _, q := range []string{
		"CREATE SCHEMA " + pgx.Identifier{left}.Sanitize(),
		"CREATE SCHEMA " + pgx.Identifier{kept}.Sanitize(),
		"CREATE ROLE " + pgx.Identifier{role}.Sanitize(),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = dropSchema(conn, kept)
		forget(conn, kept)
	})
	for _, o := range []struct {
		name, kind string
		pid        int
	}{{left, "schema", gone.Process.Pid}, {role, "role", gone.Process.Pid}, {kept, "schema", me.pid}} {
		if _, err := conn.Exec(ctx, `INSERT INTO `+objectsTable+` (name, kind, host, boot, pid) VALUES ($1, $2, $3, $4, $5)`,
			o.name, o.kind, me.host, me.boot, o.pid); err != nil {
			t.Fatal(err)
		}
	}
	sweep(conn)
	for name, want := range map[string]bool{left: false, kept: true} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("schema %s exists %v after the sweep, want %v", name, exists, want)
		}
	}
	var roleExists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = $1)", role).Scan(&roleExists); err != nil {
		t.Fatal(err)
	}
	if roleExists {
		t.Errorf("role %s left by a gone process survived the sweep", role)
	}
}
