#!/usr/bin/env bash
# Browser test of the web page: installs Chromium (apt) and playwright-core (npm) when
# missing, builds keel, starts `keel serve` with the demo model on a free loopback port in
# a temporary directory, and runs tests/browser/chat.test.mjs (the page) and
# tests/browser/origin.test.mjs (pages of other sites and rebound names must not reach the
# API) in headless Chromium. The screenshot lands in target/browser/chat.png. Exits non-zero
# on any failure.
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
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# `exec` makes the recorded pid keel's own, so the clean-up stops the daemon itself.
(cd "$work" && exec env -u KEEL_CONFIG -u KEEL_LISTEN -u KEEL_DATABASE_URL -u OPENAI_API_KEY -u ANTHROPIC_API_KEY \
  "$keel" serve --listen 127.0.0.1:0 >"$work/serve.log" 2>&1) &
server_pid=$!

url=""
for _ in $(seq 1 300); do
  url="$(grep -o 'keel listening on http://[0-9.:]*' "$work/serve.log" | head -n1 | sed 's/keel listening on //' || true)"
  [ -n "$url" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$work/serve.log" >&2
    echo "keel serve exited before listening" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  cat "$work/serve.log" >&2
  echo "keel serve did not report its address" >&2
  exit 1
fi
echo "keel serve at $url" >&2

mkdir -p "$root/target/browser"
KEEL_URL="$url" CHROMIUM="$chromium" SCREENSHOT_DIR="$root/target/browser" \
  node --test --test-concurrency=1 tests/browser/chat.test.mjs tests/browser/origin.test.mjs
