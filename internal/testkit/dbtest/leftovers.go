package dbtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// An interrupted test run (Ctrl-C, a killed CI job, a test binary that
// panicked) never runs its cleanups and leaves its schemas and roles in the
// test database. Each test process records what it creates in
// public.dbtest_objects with its host, boot and process id, and removes the
// record when it drops the object; the first test of every process drops
// what a process of this machine left behind that is no longer running
// (another boot, or a process id that is gone). Objects of other machines
// sharing the database, and of test processes still running, are left
// alone.

// objectsTable is the registry of the objects tests created.
const objectsTable = "public.dbtest_objects"

const queryObjectsCreate = `
CREATE TABLE IF NOT EXISTS public.dbtest_objects (
    name    text PRIMARY KEY,
    kind    text NOT NULL CHECK (kind IN ('schema', 'role')),
    host    text NOT NULL,
    boot    text NOT NULL,
    pid     int  NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
)`

var sweepOnce sync.Once

// owner identifies this test process: its host, the machine's boot and
// its process id.
type owner struct {
	host, boot string
	pid        int
}

func thisProcess() owner {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return owner{host: host, boot: strings.TrimSpace(string(boot)), pid: os.Getpid()}
}

// record notes in the registry that this process created the object name
// of kind ("schema" or "role"), after sweeping leftovers once per process.
// A failure is not the test's: the object is still dropped at cleanup.
func record(conn *pgx.Conn, kind, name string) {
	ctx := context.Background()
	sweepOnce.Do(func() { sweep(conn) })
	me := thisProcess()
	_, _ = conn.Exec(ctx, `INSERT INTO `+objectsTable+` (name, kind, host, boot, pid) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING`,
		name, kind, me.host, me.boot, me.pid)
}

// forget removes name from the registry once it is dropped.
func forget(conn *pgx.Conn, name string) {
	_, _ = conn.Exec(context.Background(), `DELETE FROM `+objectsTable+` WHERE name = $1`, name)
}

// sweep drops the schemas and roles that test processes of this host left
// behind: recorded under another boot, or by a process that is gone.
func sweep(conn *pgx.Conn) {
	ctx := context.Background()
	if _, err := conn.Exec(ctx, queryObjectsCreate); err != nil {
		return // a concurrent creation, or no right to create: nothing to sweep
	}
	me := thisProcess()
	rows, err := conn.Query(ctx, `SELECT name, kind, boot, pid FROM `+objectsTable+` WHERE host = $1 ORDER BY kind DESC`, me.host)
	if err != nil {
		return
	}
	type object struct {
		Name, Kind, Boot string
		Pid              int
	}
	objects, err := pgx.CollectRows(rows, pgx.RowToStructByPos[object])
	if err != nil {
		return
	}
	for _, o := range objects {
		if o.Boot == me.boot && running(o.Pid) {
			continue
		}
		quoted := pgx.Identifier{o.Name}.Sanitize()
		switch o.Kind {
		case "schema":
			err = dropSchema(conn, o.Name)
		case "role":
			_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = $1", o.Name)
			if _, err = conn.Exec(ctx, "DROP OWNED BY "+quoted+" CASCADE"); err == nil || strings.Contains(err.Error(), "does not exist") {
				_, err = conn.Exec(ctx, "DROP ROLE IF EXISTS "+quoted)
			}
		}
		if err == nil {
			forget(conn, o.Name)
		}
	}
}

// running reports whether a process with id pid runs on this machine.
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
