# Conveniences; CI runs .ci/run, which needs nothing but Go (and installs PostgreSQL).

DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/outbox_bench?sslmode=disable
NATS_URL ?= nats://127.0.0.1:4222
REFLOOP ?= ../shared/refloop

.PHONY: build test ci bench

build:
	.ci/build bin/outbox-relay

test:
	go test -race ./...

ci:
	bash .ci/run

# Drain rate of a 100k backlog against refloop, alternating, same database and NATS.
bench: build
	cd $(REFLOOP) && go build -o $(CURDIR)/bin/refloop .
	psql "$(DATABASE_URL)" -c 'select 1' >/dev/null 2>&1 || psql "$(subst outbox_bench,postgres,$(DATABASE_URL))" -c 'CREATE DATABASE outbox_bench'
	LOG_LEVEL=error DATABASE_URL="$(DATABASE_URL)" NATS_URL="$(NATS_URL)" bin/outbox-relay bench -compare bin/refloop -rounds 5
