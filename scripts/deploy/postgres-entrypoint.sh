#!/bin/sh
# The entry point of services.Containerfile: `postgres` initialises $PGDATA on first start
# (user POSTGRES_USER with POSTGRES_PASSWORD, database POSTGRES_DB, password logins from the
# network) and runs the server as user postgres; anything else is run as it is.
set -eu
if [ "${1:-}" != postgres ]; then exec "$@"; fi
install -d -o postgres -g postgres -m 0700 "$PGDATA"
install -d -o postgres -g postgres /run/postgresql
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password=$(mktemp)
  printf '%s' "$POSTGRES_PASSWORD" > "$password"
  chown postgres "$password"
  as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$password" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale >/dev/null
  rm -f "$password"
  echo 'host all all all scram-sha-256' >> "$PGDATA/pg_hba.conf"
  as_postgres pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  as_postgres psql -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
  as_postgres pg_ctl -D "$PGDATA" -w stop >/dev/null
fi
shift
exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
  postgres -D "$PGDATA" -c listen_addresses='*' "$@"
