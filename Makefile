# Conveniences; CI runs .ci/run, which needs nothing but Go and make (and installs
# PostgreSQL, RabbitMQ and promtool).

DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/outbox_bench?sslmode=disable
NATS_URL ?= nats://127.0.0.1:4222
# The reference loop the bench-* targets measure the relay against
# ("refloop" in their output): the directory of a main package, built to
# bin/refloop. By default the yardstick in this repository
# (internal/benchkit/yardstick: claim with FOR UPDATE SKIP LOCKED, publish with
# Nats-Msg-Id, await the acks, archive in one statement; no retries, dead
# letters or ordering), so that no target needs code from outside the
# repository: on a fresh clone, make bench needs only PostgreSQL and NATS
# with JetStream running.
# REFLOOP=../shared/refloop measures against the workshop's loop, against
# which the ratios docs/benchmarks.md published before the yardstick were
# measured. The yardstick drops and recreates only the tables and the stream
# it made: after another loop ran on the same database it refuses, naming
# the table to drop.
REFLOOP ?= internal/benchkit/yardstick

.PHONY: build test ci helm bench bench-binary bench-replicas bench-processes bench-pin-horizon bench-many-outboxes bench-console bench-instructions bench-partitioned-claim bench-ordered-claim examples examples-run

build:
	.ci/build bin/outbox-relay

# The README's test command: what the tests need beyond Go made present
# (.ci/prerequisites: PostgreSQL, RabbitMQ, promtool), then the whole suite.
# -timeout: go test's default of 10 minutes is per package, and
# internal/cli, which runs the binary as users do (about 170 process tests),
# takes 9-10 minutes with -race on two cores; a package that hangs still
# fails, with every goroutine's stack, after 30.
test:
	bash .ci/prerequisites
	go test -race -timeout 30m ./...

ci:
	bash .ci/run

# The Helm chart (deploy/helm/outbox-relay) and the native-sidecar example
# (deploy/kubernetes): helm lint and template with the main combinations of
# values, every object decoded strictly into the Kubernetes API types. Needs
# only Go: the check (deploy/helm/check, a module of its own) imports Helm.
helm:
	bash .ci/helm

# Drain rate of a 100k backlog against refloop (the reference loop built
# from REFLOOP, by default internal/benchkit/yardstick), alternating, same database
# and NATS; developer tools (internal/benchkit/benchcmp, internal/benchkit/yardstick), not
# part of the shipped binary.
# BENCHFLAGS passes more, e.g. BENCHFLAGS='-mode steady -rate 2000 -n 20000'.
ROUNDS ?= 5
BENCHFLAGS ?=
bench:
	cd $(REFLOOP) && go build -o $(CURDIR)/bin/refloop .
	psql "$(DATABASE_URL)" -c 'select 1' >/dev/null 2>&1 || psql "$(subst outbox_bench,postgres,$(DATABASE_URL))" -c 'CREATE DATABASE outbox_bench'
	DATABASE_URL="$(DATABASE_URL)" NATS_URL="$(NATS_URL)" go run ./internal/benchkit/benchcmp -refloop bin/refloop -rounds $(ROUNDS) $(BENCHFLAGS)

# The same drain measured on the shipped binary (built as CI and the
# Dockerfile build it), run with its defaults, from exec to an empty table.
bench-binary: build
	$(MAKE) bench BENCHFLAGS='-binary bin/outbox-relay $(BENCHFLAGS)'

# Drain rate and latency with 1, 2, 4 and 8 relays (REPLICAS) in each
# mode, unordered (every relay claims from the whole table with SKIP
# LOCKED), ordered and partitioned, beside refloop with two workers per
# relay, round by round: a backlog of 200k events due at one shared
# timestamp, then a steady 2000 events/s for 20 s. The backlog runs every
# mode twice, on rows without a key and on rows with KEYS keys in
# KEY_ORDER (interleaved: row i has key i mod KEYS, as producers write
# them; grouped: each key's rows consecutive; KEYS=0: unkeyed rows only);
# refloop takes no keys and runs unkeyed rows. The steady stream's rows
# carry no key. Each prints its rounds, then a table of medians per mode
# and rows: against unordered mode on the same rows and against refloop.
# Estimated from smaller runs before the keyed rows and ordered mode were
# added (about 20 minutes on two cores with 3 rounds, about 14 with
# REPLICA_ROUNDS=2): the backlog part now runs 7 contenders a round instead
# of 3, so expect it to take more than twice as long; 8 relays hold up to
# 72 connections. REPLICA_BACKLOG and REPLICA_STEADY (events, at 2000/s)
# shrink it for a smoke run.
REPLICAS ?= 1,2,4,8
REPLICA_ROUNDS ?= 3
REPLICA_BACKLOG ?= 200000
REPLICA_STEADY ?= 40000
KEYS ?= 5000
KEY_ORDER ?= interleaved
bench-replicas:
	$(MAKE) bench ROUNDS=$(REPLICA_ROUNDS) BENCHFLAGS='-modes -replicas $(REPLICAS) -mode backlog -burst -n $(REPLICA_BACKLOG) -keys $(KEYS) -key-order $(KEY_ORDER)'
	$(MAKE) bench ROUNDS=$(REPLICA_ROUNDS) BENCHFLAGS='-modes -replicas $(REPLICAS) -mode steady -rate 2000 -n $(REPLICA_STEADY)'

# The 200k burst drained by PROCESSES relay processes of the shipped binary
# with their defaults, started one after another STAGGER apart as users
# start them, in each mode (unordered, ordered, partitioned) on rows
# without a key and on rows with KEYS keys in KEY_ORDER, beside refloop
# (unkeyed rows), round by round (benchcmp -modes -binary): the time from
# the first exec to an empty table.
PROCESSES ?= 4
STAGGER ?= 1s
bench-processes: build
	$(MAKE) bench ROUNDS=$(REPLICA_ROUNDS) BENCHFLAGS='-modes -binary bin/outbox-relay -replicas $(PROCESSES) -stagger $(STAGGER) -mode backlog -burst -n $(REPLICA_BACKLOG) -keys $(KEYS) -key-order $(KEY_ORDER)'

# The pinned-horizon benchmark (issue 21; benchcmp -pin-horizon): the
# shipped binary with its defaults and refloop, each on its own database
# of a PostgreSQL the benchmark starts with initdb (stock settings but
# pg_stat_statements; deleted at the end), a producer committing PIN_RATE
# rows/s one per transaction in each, and the horizon of the pinned
# databases pinned from PIN_AFTER one of three ways (PIN_HOW): snapshot, a
# REPEATABLE READ session holding its snapshot (the default); xid, an idle
# READ COMMITTED transaction holding a transaction id (BEGIN; SELECT
# txid_current(); left open); readers, four REPEATABLE READ readers per
# database scanning the hot table and the archive in a loop, 50 ms apart.
# Prints dead tuples, claim mean and buffers per claim (pg_stat_statements),
# claim and commit->receipt p99, the disk of each contender's tables and the
# archive's dead tuples (summed over partitions) every EVERY, then the
# pinned / unpinned ratios, the tables' disk at the end among them. Smoke
# run: make bench-pin-horizon DURATION=2m PIN_AFTER=20s EVERY=20s
# PIN_HOW=xid. An idle xid holds the horizon of every database of its
# server: with PIN_HOW=xid the unpinned contenders run on a second server of
# the benchmark's own (-server-each).
# PINFLAGS passes more (-pg-url URL, -json FILE, -refloop-unpinned, -pin-for 20m,
# -relay-env RELAY_ARCHIVE_RETENTION=5m, repeatable).
DURATION ?= 10m
EVERY ?= 1m
PIN_AFTER ?= 1m
PIN_RATE ?= 1000
PIN_HOW ?= snapshot
PINFLAGS ?=
bench-pin-horizon: build
	cd $(REFLOOP) && go build -o $(CURDIR)/bin/refloop .
	go build -o bin/benchcmp ./internal/benchkit/benchcmp
	bin/benchcmp -pin-horizon -binary bin/outbox-relay -refloop bin/refloop -duration $(DURATION) -every $(EVERY) -pin-after $(PIN_AFTER) -rate $(PIN_RATE) -pin-how $(PIN_HOW) $(PINFLAGS)

# One relay serving many outboxes (issue 23; docs/benchmarks.md, "Many
# outboxes"), on a PostgreSQL server of the benchmark's own (initdb, stock
# settings, pg_stat_statements) and a NATS server in process: the idle cost
# of OUTBOXES empty schemas without backoff, with the defaults, with
# RELAY_NOTIFY and of one schema alone, each measured for DURATION after
# WARMUP; then a trickle of TRICKLE rows/s beside a BACKLOG in another
# schema, and alone for ALONE. About 9 minutes at the defaults.
# Smoke run: make bench-many-outboxes DURATION=10s WARMUP=5s BACKLOG=20000 ALONE=10s.
# MANYFLAGS passes more (-json FILE, -parts idle|fair, -pg-url URL).
bench-many-outboxes: DURATION = 60s
OUTBOXES ?= 50
WARMUP ?= 30s
BACKLOG ?= 200000
TRICKLE ?= 20
ALONE ?= 45s
MANYFLAGS ?=
bench-many-outboxes: build
	go build -o bin/benchcmp ./internal/benchkit/benchcmp
	bin/benchcmp -many-outboxes -binary bin/outbox-relay -outboxes $(OUTBOXES) -duration $(DURATION) -warmup $(WARMUP) -backlog $(BACKLOG) -trickle-rate $(TRICKLE) -trickle-alone $(ALONE) $(MANYFLAGS)

# The web console's pages (issue 41; docs/benchmarks.md, "Console"), each
# timed 20 times through the console's handler (relay/console:
# BenchmarkPages, p50-ms and p99-ms beside ns/op) against the schema
# console_bench of TEST_DATABASE_URL: 5 million archived rows over a week,
# 100,000 dead letters, 20,000 pending rows. Seeding it takes minutes on two
# cores; the schema is kept and reused (its archive brought up to now),
# CONSOLEFLAGS=-console-reseed seeds it again. -v shows the seeding's log
# (a benchmark with sub-benchmarks prints its own log only with -v).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
CONSOLEFLAGS ?=
bench-console:
	TEST_DATABASE_URL="$(TEST_DATABASE_URL)" go test ./relay/console/ -run '^$$' -bench Pages -benchtime 20x -timeout 30m -v $(CONSOLEFLAGS)

# The instructions PostgreSQL executes per inserted row (the outbox table
# against refloop's bare table) and per claim and settle (run alone against
# prepared, as the relay runs them): docs/benchmarks.md, "The insert,
# counted". Callgrind on a throwaway cluster, so the counts repeat on a
# noisy machine. Needs valgrind and PostgreSQL's server binaries; about 5
# minutes.
bench-instructions: build
	internal/bench/instructions.sh bin/outbox-relay

# Partitioned mode's claim statement alone, timed with pgbench on a scratch
# schema of DATABASE_URL (internal/bench/partitioned_claim.sh: 200k rows
# over 5,000 keys, 3,000 in flight), told which keys have rows in flight in
# the relay and told none, alternating, ROUNDS rounds of 100 executions;
# docs/benchmarks.md, "A key's rows in flight spare the claim a lookup".
bench-partitioned-claim: build
	DATABASE_URL="$(DATABASE_URL)" internal/bench/partitioned_claim.sh bin/outbox-relay $(ROUNDS)

# Ordered mode's claim of heads alone, timed with pgbench on a scratch
# schema of DATABASE_URL (internal/bench/ordered_claim.sh: 200k rows over
# 5,000 keys, half the keys' first rows in flight in another relay, so a
# claim takes 250 heads and their runs), ROUNDS rounds of 100 executions;
# OTHER=file.sql times another version of the statement alternately (git
# show <commit>:relay/testdata/ordered/claim_heads.sql > file.sql);
# docs/benchmarks.md, "Ordered mode claims behind its own rows in flight".
bench-ordered-claim: build
	DATABASE_URL="$(DATABASE_URL)" internal/bench/ordered_claim.sh bin/outbox-relay $(ROUNDS) $(OTHER)

# The examples' tests: their INSERT statements match the docs' and work
# against a real schema, and the Go example's main runs (part of `make test`).
examples:
	go test -race ./examples/...

# Runs every example for real, twice each (each run of a program pays a new
# order; the second run of the psql script inserts nothing: the
# idempotency key is pending), against a scratch database. Not in CI. Needs
# psql, node and npm, a python3 with psycopg 3 (Debian: python3-psycopg) and
# java with a PostgreSQL JDBC jar (Debian: libpostgresql-jdbc-java).
EXAMPLES_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/outbox_examples?sslmode=disable
PYTHON ?= python3
PGJDBC ?= /usr/share/java/postgresql.jar
EXAMPLES_ROW = psql "$(EXAMPLES_DATABASE_URL)" -qAt -c "SELECT topic, convert_from(payload, 'UTF8'), key, headers, idempotency_key FROM outbox.messages" -c 'DELETE FROM outbox.messages'

examples-run:
	psql "$(subst /outbox_examples,/postgres,$(EXAMPLES_DATABASE_URL))" -q -c 'DROP DATABASE IF EXISTS outbox_examples' -c 'CREATE DATABASE outbox_examples'
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" go run . migrate
	@echo '== psql'
	psql "$(EXAMPLES_DATABASE_URL)" -q -v ON_ERROR_STOP=1 -f examples/psql/insert.sql
	psql "$(EXAMPLES_DATABASE_URL)" -q -v ON_ERROR_STOP=1 -f examples/psql/insert.sql
	$(EXAMPLES_ROW)
	@echo '== go'
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" go run ./examples/go
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" go run ./examples/go
	$(EXAMPLES_ROW)
	@echo '== python'
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" $(PYTHON) examples/python/insert.py
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" $(PYTHON) examples/python/insert.py
	$(EXAMPLES_ROW)
	@echo '== node'
	npm install --prefix examples/node --no-audit --no-fund --silent
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" node examples/node/insert.js
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" node examples/node/insert.js
	$(EXAMPLES_ROW)
	@echo '== java'
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" java -cp $(PGJDBC) examples/java/Insert.java
	DATABASE_URL="$(EXAMPLES_DATABASE_URL)" java -cp $(PGJDBC) examples/java/Insert.java
	$(EXAMPLES_ROW)
