# shellcheck shell=bash
# The unit part of scripts/deploy-test.sh: deploy/keel.service passes
# `systemd-analyze verify`, and the daemon runs with the unit's sandboxing, where a
# run_command call works. The machine is a copy of the debootstrap tree with systemd added
# and Keel installed as docs/deploy.md says (binary, user, configuration, the unit itself).
# It is booted with systemd-nspawn, so the unit runs under a real systemd (as PID 1 of the
# machine, whatever runs as PID 1 here). Where the machine cannot boot, the unit's
# sandboxing is emulated: bwrap for the file system (ProtectSystem=strict, ProtectHome,
# PrivateTmp, PrivateDevices, StateDirectory, read-only /sys and /proc/sys), setpriv for
# User, NoNewPrivileges and the empty capability sets, and unit_seccomp.py's program for
# SystemCallFilter, SystemCallErrorNumber, SystemCallArchitectures, RestrictAddressFamilies
# and RestrictNamespaces.

UNIT=$ROOT/deploy/keel.service

# The settings the emulation applies, and those it leaves to systemd: capabilities the
# daemon never has (it runs as an unprivileged user with empty capability sets), or behaviour
# outside the sandbox.
UNIT_EMULATED=(Type User Group ExecStart EnvironmentFile StateDirectory StateDirectoryMode
  WorkingDirectory UMask LimitNOFILE KillSignal KillMode TimeoutStopSec NoNewPrivileges
  ProtectSystem ProtectHome PrivateTmp PrivateDevices ProtectKernelTunables
  ProtectControlGroups CapabilityBoundingSet AmbientCapabilities RestrictAddressFamilies
  SystemCallArchitectures SystemCallFilter SystemCallErrorNumber RestrictNamespaces)
UNIT_NOT_EMULATED=(Restart RestartSec ProtectKernelModules ProtectKernelLogs ProtectClock
  ProtectHostname ProtectProc RestrictRealtime RestrictSUIDSGID LockPersonality RemoveIPC)

# The last value of KEY in the unit's [Service] section.
unit_value() {
  awk -F= -v key="$1" '/^\[/ { service = ($0 == "[Service]") } service && $1 == key {
    sub(/^[^=]*=/, ""); value = $0 } END { print value }' "$UNIT"
}

test_unit() {
  local dir=$WORK/unit
  rm -rf "$dir"
  mkdir -p "$dir"
  say "systemd-analyze verify deploy/keel.service"
  # verify wants ExecStart's program to exist: it is put at /usr/local/bin/keel in a mount
  # namespace of its own, the machine's /usr/local/bin untouched.
  unshare --mount --propagation private bash -c 'mount -t tmpfs tmpfs /usr/local/bin &&
    cp "$KEEL" /usr/local/bin/keel && systemd-analyze verify "$0"' "$UNIT" \
    >"$dir/verify.log" 2>&1 ||
    fail "systemd-analyze verify failed: $(cat "$dir/verify.log")"

  local key known=" ${UNIT_EMULATED[*]} ${UNIT_NOT_EMULATED[*]} "
  while read -r key; do
    case $known in
      *" $key "*) ;;
      *) fail "deploy/keel.service sets $key, which unit.sh does not know: add it to its lists" ;;
    esac
  done < <(awk -F= '/^\[/ { service = ($0 == "[Service]") }
    service && /^[A-Za-z]/ { print $1 }' "$UNIT" | sort -u)

  unit_machine "$dir"
  if [ "${KEEL_DEPLOY_TEST_NSPAWN:-1}" = 0 ]; then
    say "the machine is not booted (KEEL_DEPLOY_TEST_NSPAWN=0)"
  elif unit_boot "$dir"; then
    unit_in_systemd "$dir"
    return
  else
    say "THE MACHINE DID NOT BOOT (PID 1 here is $(ps -p 1 -o comm=)):" \
      "$(tail -n 3 "$dir/nspawn.log")"
  fi
  say "the unit's sandboxing is emulated instead; not emulated: ${UNIT_NOT_EMULATED[*]}"
  "$PY" "$DEPLOY/unit_seccomp.py" --unit "$UNIT" --out "$dir/seccomp.bpf"
  unshare --net --mount --pid --fork --propagation private --mount-proc \
    env UNIT_DIR="$dir" bash "$DEPLOY/unit.sh" run
}

# The debootstrap tree with systemd, cached.
unit_machine_base() {
  local base=$WORK/machine-base
  if [ -f "$base/.complete" ]; then return 0; fi
  say "adding systemd to a copy of the debootstrap tree (cached for later runs)"
  rm -rf "$base"
  cp -a --reflink=auto "$ROOTFS" "$base"
  rm -f "$base/.complete"
  chroot "$base" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends systemd systemd-sysv' \
    >"$WORK/machine-base.log" 2>&1 ||
    fail "installing systemd failed: $(tail -n 5 "$WORK/machine-base.log")"
  rm -rf "$base/var/lib/apt/lists"/*
  touch "$base/.complete"
}

# A Debian 12 machine with Keel installed as docs/deploy.md says: the binary, a system user,
# /etc/keel/keel.toml (the mock provider's key in /etc/keel/keel.env, read through
# EnvironmentFile), the unit; and the state directory as systemd makes it.
unit_machine() {
  local dir=$1 machine=$1/machine token
  unit_machine_base
  say "installing keel into a copy of that machine"
  cp -a --reflink=auto "$WORK/machine-base" "$machine"
  rm -f "$machine/.complete"
  strip -o "$machine/usr/local/bin/keel" "$KEEL"
  chroot "$machine" useradd --system --home-dir /var/lib/keel --shell /usr/sbin/nologin keel
  mkdir -p "$machine/etc/keel" "$machine/etc/systemd/system"
  token=$(new_token)
  echo "$token" >"$dir/token"
  write_test_config "$machine/etc/keel/keel.toml" "http://127.0.0.1:9000/v1" \
    "127.0.0.1:8700" "$(token_hash "$token")"
  sed -i 's|^base_url = .*|&\napi_key_env = "MOCK_API_KEY"|' "$machine/etc/keel/keel.toml"
  echo "MOCK_API_KEY=not-a-secret" >"$machine/etc/keel/keel.env"
  chmod 600 "$machine/etc/keel/keel.env"
  cp "$UNIT" "$machine/etc/systemd/system/keel.service"
  local state
  state=/var/lib/$(unit_value StateDirectory)
  install -d -m "$(unit_value StateDirectoryMode)" "$machine$state"
  chroot "$machine" chown "$(unit_value User):$(unit_value Group)" "$state"
}

# Boots the machine with systemd-nspawn (loopback only); sets LEADER, its PID 1 as seen here.
unit_boot() {
  # nspawn's own system-call filter withholds Landlock from its machines, as some container
  # engines' filters do: the machine gets the calls Keel's run_command needs.
  local dir=$1
  local flags=(--quiet --private-network --boot --console=read-only
    --directory="$dir/machine" --machine=keel-deploy-test
    --system-call-filter="landlock_create_ruleset landlock_add_rule landlock_restrict_self")
  # Without systemd as PID 1 here, nspawn has no manager to make it a scope: it stays in its
  # own (--keep-unit). It registers with no machine manager either way.
  flags+=(--register=no)
  if [ "$(ps -p 1 -o comm=)" != systemd ]; then flags+=(--keep-unit); fi
  say "booting the machine with systemd-nspawn"
  systemd-nspawn "${flags[@]}" >"$dir/nspawn.log" 2>&1 &
  local nspawn=$!
  at_exit "kill -TERM $nspawn; wait_for 30 process_gone $nspawn; kill -KILL $nspawn"
  local state=""
  if wait_for 30 pgrep -P "$nspawn" -x systemd; then
    LEADER=$(pgrep -P "$nspawn" -x systemd)
    if wait_for 30 in_machine test -S /run/systemd/private; then
      state=$(in_machine timeout 60 systemctl is-system-running --wait) || true
    fi
  fi
  case $state in
    running | degraded) say "the machine's systemd is up ($state)" ;;
    *)
      kill -KILL "$nspawn" 2>/dev/null || true
      wait_for 10 process_gone "$nspawn" || true
      return 1
      ;;
  esac
}

in_machine() { nsenter --target "$LEADER" --all -- "$@"; }
in_machine_net() { nsenter --target "$LEADER" --net -- "$@"; }

# The unit under the machine's systemd: started with systemctl, checked, stopped.
unit_in_systemd() {
  local dir=$1 machine=$1/machine
  say "systemd-analyze security, in the machine:" \
    "$(in_machine systemd-analyze security keel.service | tail -n 1)"
  local nofile
  nofile=$(unit_value LimitNOFILE)
  if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$nofile" ]; then
    # Raising a limit takes a capability this machine withholds even from root.
    say "LimitNOFILE=$nofile lowered to this machine's hard limit $(ulimit -Hn) (a drop-in)"
    mkdir -p "$machine/etc/systemd/system/keel.service.d"
    printf '[Service]\nLimitNOFILE=%s\n' "$(ulimit -Hn)" \
      >"$machine/etc/systemd/system/keel.service.d/limit.conf"
  fi
  in_machine systemctl daemon-reload
  in_machine systemd-run --quiet --unit=keel-mock /usr/local/bin/keel mock-provider \
    --listen 127.0.0.1:9000
  in_machine systemctl start keel.service ||
    fail "systemctl start keel failed: $(in_machine journalctl -u keel --no-pager | tail -n 5)"
  wait_for 60 in_machine_net curl -fsS http://127.0.0.1:8700/readyz ||
    fail "keel did not become ready: $(in_machine journalctl -u keel --no-pager | tail -n 5)"
  local pid
  pid=$(in_machine systemctl show -p MainPID --value keel.service)
  unit_checks "$machine" "$(in_machine cat "/proc/$pid/status")" in_machine_net

  local started code result
  started=$SECONDS
  in_machine systemctl stop keel.service
  result=$(in_machine systemctl show -p Result --value keel.service)
  code=$(in_machine systemctl show -p ExecMainStatus --value keel.service)
  if [ "$result" != success ] || [ "$code" != 0 ]; then
    fail "systemctl stop: result $result, status $code"
  fi
  in_machine journalctl -u keel --no-pager | grep -q 'shutting down: releasing running chats' ||
    fail "keel did not shut down on $(unit_value KillSignal)"
  say "systemctl stop: $(unit_value KillSignal) to keel, which released its chats and exited 0" \
    "in $((SECONDS - started)) s"
}

# What must hold of the daemon under the unit: its process STATUS (/proc/PID/status) shows
# the unit's user, no_new_privs, a seccomp filter and no capabilities; a chat streams; a
# run_command call works, confined, and cannot make a namespace. NET runs a command in the
# daemon's network namespace.
unit_checks() {
  local machine=$1 status=$2 net=$3 user uid
  user=$(unit_value User)
  uid=$(chroot "$machine" id -u "$user")
  say "the daemon: $(echo "$status" | grep -E '^(Uid|NoNewPrivs|Seccomp|CapEff|CapBnd):' |
    tr -s '\t ' ' ' | tr '\n' ';')"
  echo "$status" | grep -qE "^Uid:\s+$uid\s+$uid\s" || fail "keel does not run as $user ($uid)"
  echo "$status" | grep -qE '^NoNewPrivs:\s+1' || fail "keel runs without no_new_privs"
  echo "$status" | grep -qE '^Seccomp:\s+2' || fail "keel runs without a seccomp filter"
  echo "$status" | grep -qE '^CapBnd:\s+0+$' || fail "keel's capability bounding set is not empty"
  echo "$status" | grep -qE '^CapEff:\s+0+$' || fail "keel has capabilities"

  local token out
  token=$(cat "$WORK/unit/token")
  $net "$PY" "$DEPLOY/chat.py" --base http://127.0.0.1:8700 --token "$token" \
    --words 30 --rate 60 >&2
  out=$($net "$PY" "$DEPLOY/run_command.py" --base http://127.0.0.1:8700 --token "$token" \
    'id -u; echo confined > made.txt; cat made.txt; cat /proc/$PPID/environ; touch /tmp/x
    unshare --user true && echo namespaces-allowed || echo namespaces-refused')
  say "run_command answered: $(echo "$out" | tr '\n' ' ')"
  echo "$out" | grep -qx "$uid" || fail "the command did not run as $user"
  echo "$out" | grep -qx confined || fail "the command could not write its workspace"
  echo "$out" | grep -qE 'environ: (Permission denied|No such file)' ||
    fail "the command read keel's environment"
  echo "$out" | grep -qx namespaces-refused || fail "the command could make a namespace"
  [ -f "$machine/var/lib/$(unit_value StateDirectory)/workspace/alice/made.txt" ] ||
    fail "the workspace is not in the state directory"
}

# Inside network, mount and PID namespaces of their own: the mock provider, and the daemon
# under the unit's sandboxing; then the checks.
unit_run() {
  local dir=$UNIT_DIR machine=$UNIT_DIR/machine
  ip link set lo up
  "$KEEL" mock-provider --listen 127.0.0.1:9000 >"$dir/mock.log" 2>&1 &

  local state workdir user group exec_start env_file umask_value nofile
  state=/var/lib/$(unit_value StateDirectory)
  workdir=$(unit_value WorkingDirectory)
  user=$(unit_value User)
  group=$(unit_value Group)
  exec_start=$(unit_value ExecStart)
  env_file=$(unit_value EnvironmentFile)
  umask_value=$(unit_value UMask)
  nofile=$(unit_value LimitNOFILE)
  [ "$(unit_value ProtectSystem)" = strict ] || fail "the emulation expects ProtectSystem=strict"
  [ "$(unit_value NoNewPrivileges)" = yes ] || fail "the emulation expects NoNewPrivileges=yes"
  [ "$(unit_value ProtectHome)" = yes ] || fail "the emulation expects ProtectHome=yes"
  [ "$(unit_value PrivateTmp)" = yes ] || fail "the emulation expects PrivateTmp=yes"
  [ "$(unit_value PrivateDevices)" = yes ] || fail "the emulation expects PrivateDevices=yes"
  [ -z "$(unit_value CapabilityBoundingSet)" ] || fail "the emulation expects no capabilities"

  # The environment systemd gives a service: PATH, LANG, the user's names, and
  # EnvironmentFile (read by systemd as root; `-` makes it optional).
  local environment=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin LANG=C.UTF-8
    USER="$user" LOGNAME="$user" HOME="$state" SHELL=/usr/sbin/nologin
    STATE_DIRECTORY="$state")
  if [ -f "$machine${env_file#-}" ]; then
    mapfile -t -O ${#environment[@]} environment \
      < <(grep -v '^\s*#' "$machine${env_file#-}" | grep -e '=')
  fi
  local setenv=() pair
  for pair in "${environment[@]}"; do setenv+=(--setenv "${pair%%=*}" "${pair#*=}"); done

  # The file limit: the unit's, or the most this machine lets even root set.
  if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$nofile" ]; then
    say "LimitNOFILE=$nofile lowered to this machine's hard limit $(ulimit -Hn)"
    nofile=$(ulimit -Hn)
  fi
  local sandbox=(bwrap --ro-bind "$machine" / --bind "$machine$state" "$state"
    --dev /dev --proc /proc --ro-bind /sys /sys --ro-bind /proc/sys /proc/sys
    --tmpfs /tmp --tmpfs /var/tmp)
  local home
  for home in /home /root /run/user; do
    if [ -d "$machine$home" ]; then sandbox+=(--perms 0000 --tmpfs "$home"); fi
  done
  sandbox+=(--chdir "$workdir" --clearenv "${setenv[@]}" --die-with-parent --seccomp 9)
  local identity=(setpriv --reuid="$user" --regid="$group" --init-groups --no-new-privs
    --bounding-set=-all --inh-caps=-all --ambient-caps=-all)
  # shellcheck disable=SC2086 # ExecStart is split into words, as systemd splits it
  "${sandbox[@]}" "${identity[@]}" -- /bin/sh -c 'umask "$0"; ulimit -n "$1"; shift; exec "$@"' \
    "$umask_value" "$nofile" $exec_start 9<"$dir/seccomp.bpf" >"$dir/keel.log" 2>&1 &
  local bwrap=$!
  wait_for 60 curl -fsS http://127.0.0.1:8700/readyz ||
    fail "keel did not start under the unit's sandboxing: $(tail -n 5 "$dir/keel.log")"
  local keel
  keel=$(pgrep -P "$bwrap")
  [ "$(cat "/proc/$keel/comm")" = keel ] ||
    fail "the main process is $(cat "/proc/$keel/comm"), not keel"

  unit_checks "$machine" "$(cat "/proc/$keel/status")" ""

  # Stopping as systemd does: KillSignal to the main process only (KillMode=mixed), which
  # must exit 0 within TimeoutStopSec.
  local signal timeout code=0
  signal=$(unit_value KillSignal)
  timeout=$(unit_value TimeoutStopSec)
  timeout=${timeout%s}
  [ "$(unit_value KillMode)" = mixed ] || fail "the emulation expects KillMode=mixed"
  kill -s "${signal#SIG}" "$keel"
  wait_for "$timeout" process_gone "$bwrap" ||
    fail "keel did not stop within TimeoutStopSec=${timeout}s"
  wait "$bwrap" || code=$?
  [ "$code" = 0 ] || fail "keel exited with $code on $signal"
  grep -q 'shutting down: releasing running chats' "$dir/keel.log" ||
    fail "keel did not shut down on $signal"
  say "$signal: keel released its chats and exited 0 within TimeoutStopSec"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  . "$DEPLOY/lib.sh"
  . "$DEPLOY/image.sh"
  UNIT=$ROOT/deploy/keel.service
  case $1 in
    run) unit_run ;;
    *) fail "unit.sh: unknown command $1" ;;
  esac
fi
