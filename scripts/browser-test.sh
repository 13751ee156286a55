#!/usr/bin/env bash
# Browser test of the web page: installs Chromium (apt) and playwright-core (npm) when
# missing, builds keel, and starts on free loopback ports, each in a temporary directory:
# `keel serve` with the demo model (KEEL_URL), and a second `keel serve` with a user and two
# models, one served by `keel mock-provider` and one whose provider is down (KEEL_USERS_URL,
# its token in KEEL_TOKEN). Then it runs in headless Chromium tests/browser/chat.test.mjs
# (streaming, stop, Continue, Retry, an unreachable daemon, client-side tools),
# tests/browser/product.test.mjs (Markdown, copy, the chat list and its feed, titles, archive,
# the model picker, provider errors, the phone drawer, tokens and log-out),
# tests/browser/origin.test.mjs (pages of other sites and rebound names must not reach the
# API) and tests/browser/branches.test.mjs (an edit's branch and the arrows across a reload
# and a kill -9; it starts and restarts a daemon of its own from KEEL_BIN), then the page as
# a person uses it, at 1280×800 and 390×844, light and dark: follow.test.mjs (the view
# follows a reply; a daemon killed and restarted mid-reply), touch.test.mjs (rows under a
# finger, undo), keyboard.test.mjs, navigation.test.mjs (addresses, Back and Forward),
# dialogs.test.mjs, editing.test.mjs (editing in place, failed turns) and look.test.mjs
# (axe-core on every screen, contrast, the message box). Screenshots land in
# target/browser/. Exits non-zero on any failure.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
chromium="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$chromium" ]; then
  echo "installing chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v node >/dev/null; then
  echo "installing nodejs" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ -f tests/browser/package-lock.json ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
else
  (cd tests/browser && npm install --no-audit --no-fund --loglevel=error)
fi

cargo build -p keel
keel="$target/debug/keel"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits until LOG shows PATTERN followed by an http://ADDRESS and prints that URL.
wait_for_url() {
  local log="$1" pattern="$2" pid="$3" url=""
  for _ in $(seq 1 300); do
    url="$(grep -o "$pattern http://[0-9.:]*" "$log" | head -n1 | sed "s/$pattern //" || true)"
    if [ -n "$url" ]; then
      echo "$url"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      echo "the process exited before listening" >&2
      return 1
    fi
    sleep 0.1
  done
  cat "$log" >&2
  echo "no address reported in $log" >&2
  return 1
}

clean_env=(env -u KEEL_CONFIG -u KEEL_LISTEN -u KEEL_DATABASE_URL -u OPENAI_API_KEY -u ANTHROPIC_API_KEY)

# The demo daemon. `exec` makes the recorded pid keel's own, so the clean-up stops it.
mkdir -p "$work/demo"
(cd "$work/demo" && exec "${clean_env[@]}" "$keel" serve --listen 127.0.0.1:0 >"$work/demo.log" 2>&1) &
pids+=($!)
url="$(wait_for_url "$work/demo.log" "keel listening on" "${pids[-1]}")"
echo "keel serve (demo) at $url" >&2

# The daemon with a user and two models.
(exec "$keel" mock-provider --listen 127.0.0.1:0 >"$work/mock.log" 2>&1) &
pids+=($!)
mock="$(wait_for_url "$work/mock.log" "mock provider listening on" "${pids[-1]}")"
mkdir -p "$work/users"
cat >"$work/users/keel.toml" <<TOML
[runs]
retry_max_attempts = 1

[[providers]]
name = "local-mock"
kind = "openai-chat"
base_url = "$mock/v1"

[[providers]]
name = "offline"
kind = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "mock"
provider = "local-mock"
model = "mock"
default = true

[[models]]
id = "unreachable"
provider = "offline"
model = "mock"
TOML
token="$(cd "$work/users" && "${clean_env[@]}" "$keel" users add alice --config keel.toml --database "sqlite://$work/users/keel.db" 2>/dev/null)"
(cd "$work/users" && exec "${clean_env[@]}" "$keel" serve --listen 127.0.0.1:0 --config keel.toml \
  --database "sqlite://$work/users/keel.db" >"$work/users.log" 2>&1) &
pids+=($!)
users_url="$(wait_for_url "$work/users.log" "keel listening on" "${pids[-1]}")"
echo "keel serve (users) at $users_url" >&2

mkdir -p "$root/target/browser"
KEEL_URL="$url" KEEL_USERS_URL="$users_url" KEEL_TOKEN="$token" CHROMIUM="$chromium" \
  KEEL_BIN="$keel" SCREENSHOT_DIR="$root/target/browser" \
  node --test --test-concurrency=1 tests/browser/chat.test.mjs tests/browser/product.test.mjs \
  tests/browser/origin.test.mjs tests/browser/branches.test.mjs tests/browser/list.test.mjs \
  tests/browser/follow.test.mjs tests/browser/touch.test.mjs tests/browser/keyboard.test.mjs \
  tests/browser/navigation.test.mjs tests/browser/dialogs.test.mjs tests/browser/editing.test.mjs \
  tests/browser/look.test.mjs
