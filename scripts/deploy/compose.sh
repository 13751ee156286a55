# shellcheck shell=bash
# The compose part of scripts/deploy-test.sh: deploy/compose.yaml and deploy/Caddyfile, as
# they are, in a project directory of the test's own with its .env, its keel.toml (the mock
# provider as the model, a short lease, one user) and compose.test.yaml (which adds the mock
# provider as a service). Run by podman-compose, or where containers cannot run, as processes
# (compose_processes.py) in network, mount and PID namespaces of their own.
#
# `bash compose.sh stop-busy SIGNAL` (run by chat.py mid-reply) sends SIGNAL to the replica
# whose metrics show a running chat.

PROJECT=keeldeploytest
SERVICES_IMAGE=localhost/keel-test-services:bookworm
REPLICAS=(keel1 keel2)

test_compose() {
  local dir=$WORK/compose
  rm -rf "$dir"
  mkdir -p "$dir/project"
  cp "$ROOT/deploy/compose.yaml" "$ROOT/deploy/Caddyfile" "$dir/project/"
  local port token
  port=$(free_port)
  token=$(new_token)
  write_test_config "$dir/project/keel.test.toml" "http://mock:9000/v1" "127.0.0.1:$port" \
    "$(token_hash "$token")"
  cat >"$dir/project/.env" <<EOF
POSTGRES_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
KEEL_HTTP_PORT=$port
KEEL_IMAGE=$IMAGE
KEEL_POSTGRES_IMAGE=$SERVICES_IMAGE
KEEL_PROXY_IMAGE=$SERVICES_IMAGE
KEEL_CONFIG_FILE=./keel.test.toml
EOF
  cat >"$dir/project/compose.test.yaml" <<'EOF'
services:
  mock:
    image: ${KEEL_IMAGE}
    command: ["mock-provider", "--listen", "0.0.0.0:9000"]
EOF
  export COMPOSE_DIR=$dir/project PROXY="http://127.0.0.1:$port" TOKEN=$token
  if [ "$CONTAINERS" = 1 ]; then
    compose_up_podman
    compose_scenario
  else
    # PostgreSQL's server binaries (the machine's own cluster is left alone).
    find_postgres || install_packages postgresql
    find_postgres || fail "PostgreSQL's server binaries are missing"
    unshare --net --mount --pid --fork --propagation private --mount-proc \
      bash "$DEPLOY/compose.sh" scenario
  fi
}

compose() {
  (cd "$COMPOSE_DIR" && podman-compose -p "$PROJECT" -f compose.yaml -f compose.test.yaml "$@")
}

compose_up_podman() {
  if ! pm image exists "$IMAGE" || [ "${IMAGE_BUILT:-0}" != 1 ]; then build_image; fi
  if ! pm image exists "$SERVICES_IMAGE"; then
    say "building $SERVICES_IMAGE (Debian's PostgreSQL and Caddy; cached for later runs)"
    pm build -q --layers=false --network host --build-arg BASE=localhost/keel-base:bookworm \
      -f "$DEPLOY/services.Containerfile" -t "$SERVICES_IMAGE" "$DEPLOY" \
      >"$WORK/services-build.log" 2>&1 ||
      fail "building $SERVICES_IMAGE failed: $(tail -n 20 "$WORK/services-build.log")"
  fi
  at_exit "pm network rm -f ${PROJECT}_default; pm volume prune -f"
  at_exit "compose down -v >>'$WORK/compose/podman-compose.log' 2>&1"
  say "podman-compose up"
  compose up -d >"$WORK/compose/podman-compose.log" 2>&1 ||
    fail "podman-compose up failed: $(tail -n 20 "$WORK/compose/podman-compose.log")"
}

# What runs where: the podman containers of the project, or the processes of
# compose_processes.py (their pid and address in STATE).
replica_get() { # NAME PATH: an HTTP GET to the replica itself, as its health check does
  if [ "$CONTAINERS" = 1 ]; then
    pm exec "${PROJECT}_$1_1" curl -fsS "http://127.0.0.1:8700$2"
  else
    curl -fsS "http://$(cat "$STATE/$1.ip"):8700$2"
  fi
}
replica_signal() { # NAME SIGNAL
  if [ "$CONTAINERS" = 1 ]; then
    if [ "$2" = KILL ]; then
      pm kill -s KILL "${PROJECT}_$1_1"
    else
      pm stop -t 30 "${PROJECT}_$1_1"
    fi
  else
    local pid
    pid=$(cat "$STATE/$1.pid")
    kill -s "$2" "$pid"
    if [ "$2" != KILL ]; then wait_for 30 process_gone "$pid"; fi
  fi
}
replica_start() { # NAME: a stopped replica replaced, as docs/deploy.md's rolling upgrade does
  if [ "$CONTAINERS" = 1 ]; then
    pm rm -f "${PROJECT}_$1_1"
    compose up -d "$1" >>"$WORK/compose/podman-compose.log" 2>&1
  else
    compose_processes up-one "$1"
  fi
}
# Whether the replica answers /readyz; one that has exited (killed, or a start that failed) is
# replaced, and one still starting is left to finish.
replica_back() { # NAME
  if replica_get "$1" /readyz >/dev/null 2>&1; then return 0; fi
  if ! replica_running "$1"; then replica_start "$1" >/dev/null 2>&1 || true; fi
  return 1
}
replica_diagnosis() { # NAME: what the test saw of it, for the failure message
  if [ "$CONTAINERS" = 1 ]; then
    echo "state: $(pm inspect -f '{{.State.Status}} exit {{.State.ExitCode}}' \
      "${PROJECT}_$1_1" 2>&1)"
    echo "podman-compose: $(tail -n 10 "$WORK/compose/podman-compose.log")"
  fi
  echo "log: $(replica_log "$1" 2>&1 | tail -n 15)"
}
replica_log() {
  if [ "$CONTAINERS" = 1 ]; then pm logs "${PROJECT}_$1_1" 2>&1; else cat "$STATE/$1.log"; fi
}
replica_running() {
  if [ "$CONTAINERS" = 1 ]; then
    [ "$(pm inspect -f '{{.State.Running}}' "${PROJECT}_$1_1")" = true ]
  else
    if process_gone "$(cat "$STATE/$1.pid")"; then return 1; fi
  fi
}
compose_run() { # SERVICE ARGS...: a one-off container of the service
  if [ "$CONTAINERS" = 1 ]; then compose run --rm "$@"; else compose_processes run "$@"; fi
}
compose_psql() { # SQL, as the database's owner
  local password
  password=$(sed -n 's/^POSTGRES_PASSWORD=//p' "$COMPOSE_DIR/.env")
  if [ "$CONTAINERS" = 1 ]; then
    pm exec "${PROJECT}_postgres_1" psql -U keel -d keel -qAtc "$1"
  else
    PGPASSWORD=$password psql -h postgres -U keel -d keel -qAtc "$1"
  fi
}
compose_processes() {
  local action=$1
  shift
  if [ "$action" = up-one ]; then
    # One service again, as it was defined: the others keep running.
    "$PY" "$DEPLOY/compose_processes.py" up --state "$STATE" --only "$1" "${PROCESS_ARGS[@]}"
  else
    "$PY" "$DEPLOY/compose_processes.py" "$action" --state "$STATE" "${PROCESS_ARGS[@]}" -- "$@"
  fi
}

# Sends SIGNAL to the replica whose metrics show a running chat.
stop_busy() {
  local name runs
  for name in "${REPLICAS[@]}"; do
    runs=$(replica_get "$name" /metrics 2>/dev/null | awk '$1 == "keel_active_runs" { print $2 }')
    if [ "${runs:-0}" != 0 ]; then
      say "the chat runs on $name: SIG$1 to it"
      replica_signal "$name" "$1" >/dev/null
      echo "$name" >"$WORK/compose/stopped"
      return 0
    fi
  done
  fail "no replica runs the chat"
}

compose_scenario() {
  local name
  for name in "${REPLICAS[@]}"; do
    wait_for 90 replica_get "$name" /readyz ||
      fail "$name never became ready: $(replica_log "$name" | tail -n 5)"
  done
  wait_for 30 curl -fsS "$PROXY/readyz" || fail "the proxy does not reach a replica"
  say "both replicas are ready behind the proxy; migrations ran once: $(compose_psql \
    'select count(*) from _sqlx_migrations') applied"

  say "a chat through the proxy; kill -9 of the replica running it"
  "$PY" "$DEPLOY/chat.py" --base "$PROXY" --token "$TOKEN" --words 120 --rate 20 \
    --then "bash '$DEPLOY/compose.sh' stop-busy KILL" >&2
  local killed
  killed=$(cat "$WORK/compose/stopped")
  say "the chat completed on the other replica after $killed was killed"

  say "replacing $killed (as a rolling upgrade does)"
  wait_for 90 replica_back "$killed" ||
    fail "$killed did not come back: $(replica_diagnosis "$killed")"
  say "a chat through the proxy; SIGTERM to the replica running it"
  "$PY" "$DEPLOY/chat.py" --base "$PROXY" --token "$TOKEN" --words 120 --rate 20 \
    --then "bash '$DEPLOY/compose.sh' stop-busy TERM" >&2
  local stopped
  stopped=$(cat "$WORK/compose/stopped")
  replica_log "$stopped" | grep -q 'shutting down: releasing running chats' ||
    fail "$stopped did not release its chats on SIGTERM"
  replica_log "$stopped" | grep -q 'INFO keel::cmd::serve: stopped' ||
    fail "$stopped did not stop cleanly"
  say "the chat completed on the other replica after $stopped handed it over"

  say "a replica refuses a database a newer release migrated"
  compose_psql "insert into _sqlx_migrations (version, description, success, checksum,
    execution_time) values (99990101, 'from a newer release', true, '\\x00', 0)"
  # (podman-compose 1.0 exits 0 whatever the container did: its output tells.)
  local out
  out=$(compose_run keel1 migrate 2>&1) || true
  if echo "$out" | grep -q 'is up to date'; then fail "keel migrated a newer database"; fi
  echo "$out" | grep -q 'migration 99990101 was previously applied but is missing' ||
    fail "unexpected refusal: $(echo "$out" | tail -n 5)"
  compose_psql "delete from _sqlx_migrations where version = 99990101"
}

# The scenario as processes: run inside fresh network, mount and PID namespaces.
compose_processes_scenario() {
  ip link set lo up
  # The machine's /tmp and PostgreSQL socket directory stay untouched.
  mount -t tmpfs tmpfs /tmp
  mount -t tmpfs tmpfs /run/postgresql 2>/dev/null || {
    mkdir -p /run/postgresql
    mount -t tmpfs tmpfs /run/postgresql
  }
  STATE=$(mktemp -d /tmp/keel-compose.XXXXXX)
  chmod 755 "$STATE"
  export STATE
  PROCESS_ARGS=(-f "$COMPOSE_DIR/compose.yaml" -f "$COMPOSE_DIR/compose.test.yaml"
    --image "$IMAGE=keel" --image "$SERVICES_IMAGE=services")
  export PROCESS_ARGS_TEXT="${PROCESS_ARGS[*]}"
  say "starting compose.yaml's services as processes (no containers here)"
  "$PY" "$DEPLOY/compose_processes.py" up --state "$STATE" "${PROCESS_ARGS[@]}"
  wait_for 60 pg_isready -q -h postgres -U keel -d keel || fail "PostgreSQL did not start"
  compose_scenario
}

find_postgres() { ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; }

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  . "$DEPLOY/lib.sh"
  . "$DEPLOY/image.sh"
  if [ -n "${PROCESS_ARGS_TEXT:-}" ]; then read -r -a PROCESS_ARGS <<<"$PROCESS_ARGS_TEXT"; fi
  case $1 in
    stop-busy) stop_busy "$2" ;;
    scenario) compose_processes_scenario ;;
    *) fail "compose.sh: unknown command $1" ;;
  esac
fi
