package relay

import "github.com/jackc/pgx/v5"

// planPerExecution runs a statement as PostgreSQL's unnamed prepared
// statement, which is planned for the arguments of each execution (with the
// description cached by pgx, still one round trip). The claim and settle
// statements take arrays whose length decides the right plan; a cached
// generic plan does not know it and can be badly wrong.
const planPerExecution = pgx.QueryExecModeCacheDescribe
