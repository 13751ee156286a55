#!/usr/bin/env bash
# Keel's compatible endpoints against the real client libraries: the `ai` package (AI SDK UI,
# `Chat` + `DefaultChatTransport`, and a React `useChat` page in headless Chromium) and the
# official `openai` packages for Node and Python (Responses API). Installs the exact versions pinned in tests/compat/package.json and below
# into target/compat (a cache: reruns install nothing), builds keel, and runs the tests; each
# test file starts `keel serve` with the built-in demo model itself (it kills and restarts it).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$target/compat"
openai_python="3.57.0"

chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v node >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
mkdir -p "$work"
# Node resolves packages next to the test files, so the tests run from the cache directory.
cp tests/compat/*.json tests/compat/*.mjs tests/compat/*.jsx tests/compat/*.py "$work/"
if ! cmp -s tests/compat/package.json "$work/.installed" 2>/dev/null; then
  (cd "$work" && npm install --no-audit --no-fund --loglevel=error --save-exact=true)
  cp tests/compat/package.json "$work/.installed"
fi
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
fi
if ! "$work/venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$openai_python')" 2>/dev/null; then
  "$work/venv/bin/pip" install --quiet --disable-pip-version-check "openai==$openai_python"
fi

cargo build --quiet -p keel
export KEEL_BIN="$target/debug/keel" CHROMIUM="$chromium"

echo "== AI SDK UI (ai package, React useChat in Chromium) and Responses (openai npm package)"
(cd "$work" && node --test --test-concurrency=1 ai-sdk.test.mjs react.test.mjs responses.test.mjs \
  fault-matrix.test.mjs)
echo "== Responses (openai Python package)"
(cd "$work" && "$work/venv/bin/python" -m unittest -q responses_test.py responses_input_test.py \
  fault_matrix_test.py)
