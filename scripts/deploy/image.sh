# shellcheck shell=bash
# The image part of scripts/deploy-test.sh: ../../Containerfile built with the prebuilt path
# from the debootstrap base, then run with podman, or (where containers cannot run) built and
# run in a chroot of the same tree by containerfile.py.

IMAGE=localhost/keel:deploy-test

# A configuration for the test: the mock provider as the model, run_command on, one user.
write_test_config() {
  local file=$1 mock_url=$2 allowed_host=$3 token_hash=$4
  cat >"$file" <<EOF
[server]
allowed_hosts = ["$allowed_host"]

[runs]
lease_ms = 3000

[[providers]]
name     = "mock"
kind     = "openai-chat"
base_url = "$mock_url"

[[models]]
id       = "mock"
provider = "mock"
model    = "mock"

[tools]
builtin = ["read_file", "list_dir", "run_command"]

[[users]]
name         = "alice"
token_sha256 = "$token_hash"
EOF
}

# The build context of the prebuilt path: the Containerfile and dist/keel (without debug
# information, which only makes the image bigger).
image_context() {
  local context=$1
  rm -rf "$context"
  mkdir -p "$context/dist"
  cp "$ROOT/Containerfile" "$ROOT/.containerignore" "$context/"
  strip -o "$context/dist/keel" "$KEEL"
}

build_image() {
  image_context "$WORK/image/context"
  say "podman build (prebuilt binary, base localhost/keel-base:bookworm, no network)"
  pm build -q --layers=false --format docker --network none \
    --build-arg BUILD_BASE=localhost/keel-base:bookworm \
    --build-arg RUNTIME_BASE=localhost/keel-base:bookworm \
    --build-arg KEEL_BINARY=dist/keel \
    -t "$IMAGE" "$WORK/image/context" >/dev/null
  # shellcheck disable=SC2034 # compose.sh builds the image unless this run did
  IMAGE_BUILT=1
}

test_image() {
  rm -rf "$WORK/image"
  mkdir -p "$WORK/image"
  if [ "$CONTAINERS" = 1 ]; then image_in_podman; else image_in_chroot; fi
}

# What a started Keel must do: answer /readyz, stream a chat, run a command confined.
check_running_keel() {
  local base=$1 token=$2
  curl -fsS "$base/readyz" | grep -q '"status":"ready"' || fail "/readyz is not ready"
  say "/readyz answers; a chat streams from the mock provider"
  "$PY" "$DEPLOY/chat.py" --base "$base" --token "$token" --words 40 --rate 40 >&2
  local out
  out=$("$PY" "$DEPLOY/run_command.py" --base "$base" --token "$token" \
    'id -u; echo confined > made.txt; cat made.txt; cat /proc/$PPID/environ; echo')
  say "run_command answered: $(echo "$out" | tr '\n' ' ')"
  echo "$out" | grep -qx 10001 || fail "the command did not run as uid 10001"
  echo "$out" | grep -qx confined || fail "the command could not write its workspace"
  echo "$out" | grep -qE 'environ: (Permission denied|No such file)' ||
    fail "the command read keel's environment"
}

image_in_podman() {
  build_image
  local port token data=keeltest-image-data net=keeltest-image
  port=$(free_port)
  token=$(new_token)
  write_test_config "$WORK/image/keel.toml" "http://keeltest-mock:9000/v1" \
    "127.0.0.1:$port" "$(token_hash "$token")"
  at_exit "pm network rm -f $net"
  at_exit "pm volume rm -f $data"
  at_exit "pm rm -f -t 0 keeltest-keel keeltest-mock"
  pm network create "$net" >/dev/null
  pm volume create "$data" >/dev/null

  say "without users the image refuses to listen on 0.0.0.0"
  local refused
  if refused=$(pm run --rm -v "$data:/data" "$IMAGE" 2>&1); then
    fail "the image served 0.0.0.0 without users"
  fi
  echo "$refused" | grep -q 'not a loopback address and no users exist' ||
    fail "unexpected refusal: $refused"

  pm run -d --name keeltest-mock --network "$net" "$IMAGE" \
    mock-provider --listen 0.0.0.0:9000 >/dev/null
  pm run -d --name keeltest-keel --network "$net" -p "127.0.0.1:$port:8700" \
    -v "$data:/data" -v "$WORK/image/keel.toml:/etc/keel/keel.toml:ro" \
    -e KEEL_CONFIG=/etc/keel/keel.toml "$IMAGE" >/dev/null
  wait_for 60 pm healthcheck run keeltest-keel ||
    fail "the HEALTHCHECK (/readyz) never passed: $(pm logs keeltest-keel 2>&1 | tail -n 5)"
  say "the image's HEALTHCHECK passes"
  check_running_keel "http://127.0.0.1:$port" "$token"

  local top
  top=$(pm top keeltest-keel user huser pid comm)
  say "processes: $(echo "$top" | tail -n +2 | tr -s ' ' | tr '\n' ';')"
  echo "$top" | tail -n +2 | awk '$1 == "root" || $2 == "0" { bad = 1 } END { exit bad }' ||
    fail "a process of the container runs as root"
  echo "$top" | grep -q ' keel$' || fail "no keel process in the container"

  pm stop -t 30 keeltest-keel >/dev/null
  local code
  code=$(pm inspect -f '{{.State.ExitCode}}' keeltest-keel)
  [ "$code" = 0 ] || fail "keel exited with $code on SIGTERM"
  pm logs keeltest-keel 2>&1 | grep -q 'shutting down: releasing running chats' ||
    fail "keel did not shut down on SIGTERM"
  say "SIGTERM: keel released its chats and exited 0"
}

image_in_chroot() {
  local out=$WORK/image/build
  image_context "$WORK/image/context"
  say "building the Containerfile in chroots of the debootstrap tree (containerfile.py)"
  "$PY" "$DEPLOY/containerfile.py" --file "$WORK/image/context/Containerfile" \
    --context "$WORK/image/context" --out "$out" \
    --image docker.io/library/debian:bookworm-slim="$ROOTFS" \
    --image localhost/keel-base:bookworm="$ROOTFS" \
    --build-arg BUILD_BASE=localhost/keel-base:bookworm \
    --build-arg RUNTIME_BASE=localhost/keel-base:bookworm \
    --build-arg KEEL_BINARY=dist/keel
  local token
  token=$(new_token)
  write_test_config "$WORK/image/keel.toml" "http://127.0.0.1:9000/v1" \
    "127.0.0.1:8700" "$(token_hash "$token")"
  # Everything runs in network, mount and PID namespaces of its own: Keel listens on
  # 0.0.0.0:8700 as in a container, next to nothing else of the machine.
  unshare --net --mount --pid --fork --propagation private --mount-proc \
    env TOKEN="$token" OUT="$out" bash "$DEPLOY/image_chroot.sh"
}
