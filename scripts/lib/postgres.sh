# PostgreSQL for the test suite, without touching the machine's own database set-up.
#
# `ensure_postgres` sets KEEL_TEST_DATABASE_URL, in this order:
#   1. a URL already in KEEL_TEST_DATABASE_URL is kept as it is;
#   2. a server on 127.0.0.1:5432 that lets user `postgres` into database `test` without a
#      password is used as it is;
#   3. otherwise a throw-away cluster is created with `initdb` under target/, on a free port
#      of 127.0.0.1, with trust auth in that cluster's own pg_hba.conf, and a `test` database.
#      `stop_throwaway_postgres` stops it and deletes it; scripts/test calls it at exit.
# When none of this works (no PostgreSQL binaries), KEEL_TEST_DATABASE_URL stays unset: the
# PostgreSQL tests then skip with a note, or fail when `CI` is set.
#
# Nothing here installs packages, edits /etc/postgresql or starts the system cluster.

KEEL_PG_DIR=""
KEEL_PG_BIN=""
KEEL_PG_USER=""

ensure_postgres() {
  if [ -n "${KEEL_TEST_DATABASE_URL:-}" ]; then return 0; fi
  find_postgres_bin || {
    echo "no PostgreSQL binaries found: the PostgreSQL tests will not run" >&2
    return 1
  }
  export PATH="$KEEL_PG_BIN:$PATH"
  local existing="postgres://postgres@127.0.0.1:5432/test"
  if PGCONNECT_TIMEOUT=3 psql -w "$existing" -Atqc 'select 1' >/dev/null 2>&1; then
    export KEEL_TEST_DATABASE_URL="$existing"
    return 0
  fi
  start_throwaway_postgres
}

# The newest PostgreSQL's bin directory: psql on PATH is not enough, initdb and pg_ctl live
# under /usr/lib/postgresql/VERSION/bin on Debian and Ubuntu.
find_postgres_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$dir" ] && command -v pg_config >/dev/null 2>&1; then dir=$(pg_config --bindir); fi
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
    KEEL_PG_BIN="$dir"
    return 0
  fi
  return 1
}

# Runs a command as the cluster's owner: initdb and postgres refuse to run as root.
as_pg_user() {
  if [ -z "$KEEL_PG_USER" ]; then
    "$@"
  elif command -v runuser >/dev/null 2>&1; then
    runuser -u "$KEEL_PG_USER" -- "$@"
  else
    setpriv --reuid="$KEEL_PG_USER" --regid="$(id -g "$KEEL_PG_USER")" --clear-groups -- "$@"
  fi
}

start_throwaway_postgres() {
  if [ -z "$KEEL_PG_BIN" ]; then find_postgres_bin || return 1; fi
  if [ "$(id -u)" = 0 ]; then
    if id postgres >/dev/null 2>&1; then KEEL_PG_USER=postgres; else KEEL_PG_USER=nobody; fi
  fi
  mkdir -p target
  KEEL_PG_DIR=$(mktemp -d "$PWD/target/test-postgres.XXXXXX")
  if [ -n "$KEEL_PG_USER" ]; then
    chown "$KEEL_PG_USER" "$KEEL_PG_DIR"
    # The cluster's owner must reach the directory; target/ may sit under a home directory
    # it cannot enter, so fall back to a private directory in /tmp.
    if ! as_pg_user test -w "$KEEL_PG_DIR"; then
      rmdir "$KEEL_PG_DIR"
      KEEL_PG_DIR=$(mktemp -d /tmp/keel-test-postgres.XXXXXX)
      chown "$KEEL_PG_USER" "$KEEL_PG_DIR"
    fi
  fi
  if ! as_pg_user "$KEEL_PG_BIN/initdb" -D "$KEEL_PG_DIR/data" -U postgres --auth=trust \
    --no-locale -E UTF8 --no-sync >"$KEEL_PG_DIR/initdb.log" 2>&1; then
    echo "initdb failed:" >&2
    cat "$KEEL_PG_DIR/initdb.log" >&2
    return 1
  fi
  local port attempt
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    if as_pg_user "$KEEL_PG_BIN/pg_ctl" -D "$KEEL_PG_DIR/data" -l "$KEEL_PG_DIR/server.log" -w -t 60 \
      -o "-p $port -k $KEEL_PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
      start >/dev/null; then
      psql -w -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc 'create database test' || return 1
      export KEEL_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/test"
      echo "started a throw-away PostgreSQL on 127.0.0.1:$port ($KEEL_PG_DIR)" >&2
      return 0
    fi
    echo "PostgreSQL did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$KEEL_PG_DIR/server.log" >&2 || true
  done
  return 1
}

stop_throwaway_postgres() {
  if [ -z "$KEEL_PG_DIR" ]; then return 0; fi
  if [ -f "$KEEL_PG_DIR/data/postmaster.pid" ]; then
    as_pg_user "$KEEL_PG_BIN/pg_ctl" -D "$KEEL_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$KEEL_PG_DIR"
  KEEL_PG_DIR=""
}

# A TCP port on 127.0.0.1 that nothing listens on now (a race with another process taking
# it is caught by the retry in start_throwaway_postgres).
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
}
