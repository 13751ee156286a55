#!/usr/bin/env bash
# Runs the image built by containerfile.py (OUT/rootfs, OUT/config.json) as a container
# engine would: in a chroot with /proc, a minimal /dev and /data as a volume, as the image's
# user, with its environment, working directory and entry point. Called by image.sh inside
# network, mount and PID namespaces of its own (so 0.0.0.0:8700 is free, and /proc shows
# only these processes); TOKEN is the test user's token.
set -euo pipefail
EXEC=""
. "$DEPLOY/lib.sh"
. "$DEPLOY/image.sh"

tree=$OUT/rootfs
config() { "$PY" -c "import json,sys; c=json.load(open('$OUT/config.json')); print($1)"; }
ip link set lo up

# The mounts of a container: /proc, a /dev of harmless devices, a tmpfs /tmp, the volume
# (holding the image's /data at first, as a new named volume does) and the config file.
mount -t proc proc "$tree/proc"
mount -t tmpfs -o mode=755 tmpfs "$tree/dev"
for device in null zero full random urandom tty; do
  touch "$tree/dev/$device"
  mount --bind "/dev/$device" "$tree/dev/$device"
done
mount -t tmpfs -o mode=1777 tmpfs "$tree/tmp"
volume=$WORK/image/volume
rm -rf "$volume"
cp -a "$tree/data" "$volume"
mount --bind "$volume" "$tree/data"
mkdir -p "$tree/etc/keel"
touch "$tree/etc/keel/keel.toml"
mount --bind "$WORK/image/keel.toml" "$tree/etc/keel/keel.toml"

user=$(config 'c["user"]')
uid=$(chroot "$tree" id -u "${user%%:*}")
gid=$(chroot "$tree" id -g "${user%%:*}")
workdir=$(config 'c["workdir"]')
mapfile -t environment < <(config '"\n".join(f"{k}={v}" for k, v in c["env"].items())')
mapfile -t command < <(config '"\n".join(c["entrypoint"] + c["cmd"])')
mapfile -t health < <(config '"\n".join(c["healthcheck"]["cmd"])')

# argv… in the image, as its user, with its environment (and KEEL_CONFIG, as `-e` gives it).
# With EXEC=exec the calling (sub)shell becomes the entry point, whose PID then gets signals.
in_image() {
  $EXEC chroot "$tree" /usr/bin/env -i HOME="$workdir" "${environment[@]}" \
    KEEL_CONFIG=/etc/keel/keel.toml /bin/sh -c 'cd "$0" && exec "$@"' \
    "$workdir" setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all \
    --bounding-set=-all -- "$@"
}

say "without users the image refuses to listen on 0.0.0.0"
cp "$WORK/image/keel.toml" "$WORK/image/keel-no-users.toml"
sed -i '/^\[\[users\]\]/,$d' "$WORK/image/keel-no-users.toml"
mount --bind "$WORK/image/keel-no-users.toml" "$tree/etc/keel/keel.toml"
if refused=$(in_image "${command[@]}" 2>&1); then fail "the image served 0.0.0.0 without users"; fi
echo "$refused" | grep -q 'not a loopback address and no users exist' ||
  fail "unexpected refusal: $refused"
umount "$tree/etc/keel/keel.toml"

"$KEEL" mock-provider --listen 127.0.0.1:9000 >"$WORK/image/mock.log" 2>&1 &
EXEC="exec" in_image "${command[@]}" >"$WORK/image/keel.log" 2>&1 &
entry=$!
wait_for 60 in_image "${health[@]}" ||
  fail "the HEALTHCHECK (/readyz) never passed: $(tail -n 5 "$WORK/image/keel.log")"
say "the image's HEALTHCHECK passes (run in the chroot as the image's user)"
check_running_keel "http://127.0.0.1:8700" "$TOKEN"

# Every process running the image's programs (tini and keel), by their real and effective ids.
found=0
for status in /proc/[0-9]*/status; do
  exe=$(readlink "${status%/status}/exe" 2>/dev/null) || continue
  case $exe in "$tree"/*) ;; *) continue ;; esac
  read -r _ real effective _ < <(grep '^Uid:' "$status")
  say "process $(basename "$exe") runs as uid $real/$effective"
  if [ "$real" = 0 ] || [ "$effective" = 0 ]; then fail "$exe runs as root"; fi
  found=$((found + 1))
done
[ "$found" -ge 2 ] || fail "expected tini and keel running from the image, found $found"

kill -TERM "$entry"
code=0
wait "$entry" || code=$?
[ "$code" = 0 ] || fail "keel exited with $code on SIGTERM"
grep -q 'shutting down: releasing running chats' "$WORK/image/keel.log" ||
  fail "keel did not shut down on SIGTERM"
say "SIGTERM: keel released its chats and exited 0"
