# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 (trust auth, user postgres,
# database test), installing and starting it when needed.
ensure_postgres() {
  if pg_answers; then return 0; fi
  if ! ls /etc/postgresql >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    echo "installing PostgreSQL" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 60); do
    if pg_answers; then break; fi
    sleep 0.5
  done
  pg_answers || { echo "PostgreSQL did not start" >&2; return 1; }
  # Trust auth for local TCP connections and a `test` database, as the test suite expects.
  if ! psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; then
    local hba
    hba=$(ls /etc/postgresql/"$version"/main/pg_hba.conf)
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  fi
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname='test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
}

pg_answers() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -h 127.0.0.1 -p 5432 -q
  else
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
  fi
}
