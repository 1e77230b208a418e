#!/usr/bin/env bash
# A throw-away PostgreSQL for the store/postgres tests: Debian's postgresql,
# a cluster of its own (initdb) in a state folder, listening on 127.0.0.1
# only and on a unix socket in that folder, with a test role that logs in
# with a password and may create databases (each test makes its own).
#
#   bash .ci/postgres.sh start   # prints the DSN; idempotent
#   bash .ci/postgres.sh dsn     # prints the DSN of the running cluster
#   bash .ci/postgres.sh stop    # stops it and deletes its state
#   SANDBOX_AGENT_TEST_POSTGRES=$(bash .ci/postgres.sh start) go test -race -tags postgres ./store/...
#   PG_PORT=55432 (default)  PG_STATE=/var/tmp/sandbox-agent-pg (default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

port=${PG_PORT:-55432}
state=${PG_STATE:-/var/tmp/sandbox-agent-pg}
data=$state/data
role=sandbox_agent
case "$state" in /*) ;; *) echo "PG_STATE must be an absolute path" >&2; exit 2 ;; esac
[ "$state" != / ] || { echo "PG_STATE=/ would delete everything at stop" >&2; exit 2; }

# The cluster runs as postgres when we are root (initdb refuses root), else
# as whoever runs this.
if [ "$(id -u)" = 0 ]; then owner=postgres; else owner=$(id -un); fi
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$owner" -- "$@"; else "$@"; fi
}

# Debian keeps the server's programs out of PATH, one folder per major
# version; the newest wins.
bindir() {
  local initdb
  initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
  [ -x "$initdb" ] && dirname "$initdb"
}

running() { [ -f "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

dsn() {
  printf 'postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable\n' "$role" "$(cat "$state/password")" "$port" "$role"
}

sql() { as_owner "$bin/psql" -h "$state" -p "$port" -U "$owner" -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }

case "${1:-}" in
  start)
    bin=$(bindir) || { apt_install postgresql && bin=$(bindir); } || {
      echo "no PostgreSQL server programs under /usr/lib/postgresql" >&2
      exit 1
    }
    if running; then dsn; exit 0; fi
    if [ ! -f "$data/PG_VERSION" ]; then
      rm -rf "$state"
      (umask 077 && mkdir -p "$state" && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$state/password")
      chown -R "$owner" "$state"
      # --no-sync: nothing here is worth an fsync at creation.
      as_owner "$bin/initdb" -D "$data" -U "$owner" --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C --no-sync >"$state/initdb.log" 2>&1 ||
        { tail -20 "$state/initdb.log" >&2; exit 1; }
      # Tests run in parallel, each with a pool or two of its own.
      cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$state'
max_connections = 300
CONF
    fi
    as_owner "$bin/pg_ctl" -D "$data" -l "$state/postgres.log" -w -t 60 start >/dev/null ||
      { log "postgres did not start:"; tail -20 "$state/postgres.log" >&2; exit 1; }
    if [ "$(sql -c "SELECT count(*) FROM pg_roles WHERE rolname = '$role'")" = 0 ]; then
      sql -c "CREATE ROLE $role LOGIN CREATEDB PASSWORD '$(cat "$state/password")'"
      sql -c "CREATE DATABASE $role OWNER $role"
    fi
    # The tests drop their databases WITH (FORCE): that terminates what is
    # still connected, an autovacuum worker included, which needs this.
    sql -c "GRANT pg_signal_backend TO $role" >/dev/null
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || { log "postgres does not answer on 127.0.0.1:$port"; exit 1; }
    log "postgres $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (state $state)"
    dsn
    ;;
  dsn)
    if ! bin=$(bindir) || ! running; then echo "not running: bash $0 start" >&2; exit 1; fi
    dsn
    ;;
  stop)
    if bin=$(bindir) && running; then
      as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    elif [ -f "$data/postmaster.pid" ]; then
      # Its programs are gone (the package was removed under it).
      pid=$(head -n 1 "$data/postmaster.pid")
      kill -INT "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$state"
    ;;
  *)
    echo "usage: $0 start|dsn|stop" >&2
    exit 2
    ;;
esac
