#!/usr/bin/env bash
# Builds `keel`, installs the official OpenAI, Anthropic and Google Python SDKs into a venv under
# the cargo target directory, and runs scripts/check-mock-sdks.py against the mock provider.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="$target/mock-sdk-venv"

cargo build --quiet -p keel
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check openai anthropic \
    google-genai==3.6.1
exec "$venv/bin/python" scripts/check-mock-sdks.py "$target/debug/keel"
