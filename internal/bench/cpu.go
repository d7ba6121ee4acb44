package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux the relay targets).
const clockTicks = 100

// PostgresCPU measures the CPU time PostgreSQL's processes have used, when
// the server runs on this machine: the postmaster found as the parent of a
// backend of pool, its own time and that of its children that have ended
// (cutime, cstime), and the time of every live child (backends, autovacuum,
// the checkpointer, WAL writer, ...). Differences between two readings are
// the server's CPU over that span.
type PostgresCPU struct {
	postmaster int
}

// NewPostgresCPU finds the server's postmaster through a backend of pool,
// or says why it cannot (the server is not a process of this machine).
func NewPostgresCPU(ctx context.Context, pool *pgxpool.Pool) (*PostgresCPU, error) {
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, err
	}
	st, err := readStat(backend)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL does not run on this machine (no process %d): %w", backend, err)
	}
	if !strings.HasPrefix(st.comm, "postgres") {
		return nil, fmt.Errorf("process %d is %q, not a PostgreSQL backend: the server is not on this machine", backend, st.comm)
	}
	pm, err := readStat(st.ppid)
	if err != nil || !strings.HasPrefix(pm.comm, "postgres") {
		return nil, fmt.Errorf("parent %d of backend %d is not PostgreSQL's postmaster", st.ppid, backend)
	}
	return &PostgresCPU{postmaster: st.ppid}, nil
}

// Used returns the CPU time the server has used so far. A child that ends
// between the reading of the postmaster and the scan of its children would
// be counted in neither: the reading is taken again when the postmaster's
// count of ended children changed meanwhile.
func (p *PostgresCPU) Used() (time.Duration, error) {
	for try := 0; ; try++ {
		pm, err := readStat(p.postmaster)
		if err != nil {
			return 0, err
		}
		ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return 0, err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			st, err := readStat(pid)
			if err != nil || st.ppid != p.postmaster {
				continue // gone meanwhile, or not the server's
			}
			ticks += st.utime + st.stime
		}
		after, err := readStat(p.postmaster)
		if err != nil {
			return 0, err
		}
		if after.cutime+after.cstime == pm.cutime+pm.cstime || try == 4 {
			return time.Duration(ticks) * time.Second / clockTicks, nil
		}
	}
}

type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readStat parses /proc/<pid>/stat (proc(5)): the command is in
// parentheses and may hold spaces, the fields after it are space-separated.
func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return procStat{
		comm: s[open+1 : end], ppid: int(num(1)),
		utime: num(11), stime: num(12), cutime: num(13), cstime: num(14),
	}, nil
}

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU returns the CPU time (user and system) process pid has used
// so far, from /proc/<pid>/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.utime+st.stime) * time.Second / clockTicks, nil
}
