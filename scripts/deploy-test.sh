#!/usr/bin/env bash
# Proves the deployment files (docs/deploy.md): the Containerfile, deploy/compose.yaml and
# deploy/keel.service.
#
#   scripts/deploy-test.sh [image] [compose] [unit]     # all three without arguments
#
# * image   — a Debian 12 tree made with debootstrap is imported into podman as the base, the
#             image is built from ../Containerfile with this checkout's keel binary (the
#             prebuilt path), and run: it refuses to start without users, /readyz answers
#             (through the image's HEALTHCHECK), a chat streams from `keel mock-provider`,
#             a run_command call works, no process is root, SIGTERM stops it cleanly.
# * compose — deploy/compose.yaml under podman-compose, with Debian's PostgreSQL and Caddy as
#             stand-in images: a chat through the proxy completes after the replica running
#             it is killed (kill -9), another after it is stopped (SIGTERM), and a replica
#             refuses a database a newer release migrated.
# * unit    — `systemd-analyze verify deploy/keel.service`, then the daemon run with the unit's
#             sandboxing and a run_command call under it.
#
# Where containers cannot run, image and compose say so and run the same steps in a chroot of
# the debootstrap tree, and as processes from compose.yaml's definitions (KEEL_DEPLOY_TEST_
# CONTAINERS=0 forces this). Where systemd is not PID 1, unit emulates the unit's sandboxing.
# Installs what it needs with apt. The debootstrap tree and the images are cached under
# target/deploy-test; a first run takes a few minutes, later ones about two.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
WORK=$TARGET/deploy-test
DEPLOY=$ROOT/scripts/deploy
MIRROR=${KEEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
export ROOT WORK DEPLOY
# shellcheck source=scripts/deploy/lib.sh
. "$DEPLOY/lib.sh"

parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then parts=(image compose unit); fi
for part in "${parts[@]}"; do
  case $part in
    image | compose | unit) ;;
    *) fail "unknown part '$part' (image, compose, unit)" ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  fail "this test needs root (debootstrap, podman, chroot and mount namespaces)"
fi

say "installing what the test needs"
packages=(debootstrap podman runc netavark aardvark-dns podman-compose caddy python3 python3-yaml
  python3-seccomp systemd systemd-container bubblewrap iproute2 iptables util-linux procps curl
  binutils ca-certificates)
install_packages "${packages[@]}"

mkdir -p "$WORK"
trap run_cleanups EXIT

say "building keel (debug)"
if [ -n "${KEEL_BINARY:-}" ]; then
  KEEL=$KEEL_BINARY
else
  cargo build -q -p keel
  KEEL=$TARGET/debug/keel
fi
export KEEL

# The Debian 12 tree every image and chroot starts from: debootstrap, cached.
ROOTFS=$WORK/rootfs
export ROOTFS
if [ ! -f "$ROOTFS/.complete" ]; then
  say "debootstrap bookworm into $ROOTFS (cached for later runs)"
  rm -rf "$ROOTFS"
  debootstrap --variant=minbase --include=ca-certificates,curl,tini bookworm "$ROOTFS" \
    "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -n 20 "$WORK/debootstrap.log" >&2
    fail "debootstrap failed"
  }
  touch "$ROOTFS/.complete"
fi

# Whether this machine runs containers: the base image imported and a trivial container run.
CONTAINERS=0
if [ "${KEEL_DEPLOY_TEST_CONTAINERS:-1}" != 0 ]; then
  podman_setup
  pm rm -a -f -t 0 >/dev/null 2>&1 || true
  if ! pm image exists localhost/keel-base:bookworm; then
    say "importing the debootstrap tree into podman as localhost/keel-base:bookworm"
    tar -C "$ROOTFS" --exclude=./.complete -c . |
      pm import -q - localhost/keel-base:bookworm >/dev/null
  fi
  if probe=$(pm run --rm --network none localhost/keel-base:bookworm true 2>&1); then
    CONTAINERS=1
  else
    say "CONTAINERS CANNOT RUN HERE: $probe"
  fi
else
  say "containers not tried (KEEL_DEPLOY_TEST_CONTAINERS=0)"
fi
if [ "$CONTAINERS" = 0 ]; then
  say "the image is checked in a chroot of the debootstrap tree, the compose file as processes"
fi
export CONTAINERS

# shellcheck source=scripts/deploy/image.sh
. "$DEPLOY/image.sh"
# shellcheck source=scripts/deploy/compose.sh
. "$DEPLOY/compose.sh"
# shellcheck source=scripts/deploy/unit.sh
. "$DEPLOY/unit.sh"
for part in "${parts[@]}"; do
  say "== $part"
  "test_$part"
  run_cleanups
done
engine=none
if [ "$CONTAINERS" = 1 ]; then engine=podman; fi
say "deploy test passed (${parts[*]}; containers: $engine)"
