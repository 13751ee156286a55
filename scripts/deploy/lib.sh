# shellcheck shell=bash
# Shared by scripts/deploy-test.sh and its parts (image.sh, compose.sh, unit.sh): logging,
# clean-up at exit, waiting, and podman with a storage and configuration of the test's own.
#
# Expects ROOT (the repository), WORK (the test's directory under target/), KEEL (the keel
# binary) and DEPLOY (this directory).

# Debian's Python, with the modules the test installs (python3-yaml, python3-seccomp).
export PY=/usr/bin/python3

say() { printf '%s\n' "-- $*" >&2; }
fail() {
  printf '%s\n' "FAIL: $*" >&2
  exit 1
}

# Commands run at exit, last registered first.
CLEANUPS=()
at_exit() { CLEANUPS+=("$1"); }
run_cleanups() {
  local i
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
    eval "${CLEANUPS[$i]}" >/dev/null 2>&1 || true
  done
  CLEANUPS=()
}

# Retries `command...` every 0.2 s until it succeeds or `seconds` pass.
wait_for() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then return 1; fi
    sleep 0.2
  done
}

# Installs those of the Debian packages named that are missing.
install_packages() {
  local package missing=()
  for package in "$@"; do
    dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'ok installed' ||
      missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Whether process PID has ended (a zombie waiting for its parent counts as ended).
process_gone() { ! grep -qv '^Z' <(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null); }

# A TCP port on 127.0.0.1 that nothing listens on now.
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

# A fresh token and its SHA-256, as [[users]] takes it.
new_token() { echo "keel_test_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"; }
token_hash() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# Podman with a storage, runtime directory and networks of the test's own (under WORK), so
# nothing of the machine's containers is touched and images stay cached between runs.
# vfs works on every file system; runc copes with cgroups v1, v2 and hybrid set-ups (crun
# refuses hybrid ones); the limits are set low enough for the container's init to set them
# (raising one needs privileges some machines withhold even from root); netavark with
# aardvark-dns lets the services of a compose file find each other by name.
podman_setup() {
  local dir=$WORK/podman
  mkdir -p "$dir/storage" "$dir/networks"
  rm -rf "$dir/run" "$dir/tmp"
  mkdir -p "$dir/run" "$dir/tmp"
  cat >"$dir/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$dir/storage"
runroot = "$dir/run"
EOF
  local nproc=4096 runtime=""
  if [ "$(ulimit -Hu)" != unlimited ] && [ "$(ulimit -Hu)" -lt "$nproc" ]; then
    nproc=$(ulimit -Hu)
  fi
  if command -v runc >/dev/null 2>&1; then runtime='runtime = "runc"'; fi
  cat >"$dir/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Sn):$(ulimit -Sn)", "nproc=$nproc:$nproc"]
[engine]
$runtime
tmp_dir = "$dir/tmp"
[network]
network_backend = "netavark"
network_config_dir = "$dir/networks"
EOF
  export CONTAINERS_STORAGE_CONF=$dir/storage.conf CONTAINERS_CONF=$dir/containers.conf
}

# Podman without the noise it logs where no systemd runs (health-check timers).
pm() { podman "$@" 2> >(grep -v -e 'systemd connection' -e 'connect to syslog' >&2); }
