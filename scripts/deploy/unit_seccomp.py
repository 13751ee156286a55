#!/usr/bin/env python3
"""Compiles a systemd unit's system-call settings into a seccomp program (cBPF), for running
a service with its sandboxing where systemd is not PID 1 (`bwrap --seccomp FD` loads it).

Read from the unit's [Service] section: SystemCallFilter (allow lists and `~` deny lists,
groups expanded by `systemd-analyze syscall-filter`), SystemCallErrorNumber (the errno of a
refused call; without it the call kills the process, as systemd does), SystemCallArchitectures
(native only: other architectures kill), RestrictAddressFamilies (an allow list: socket() for
another family is refused) and RestrictNamespaces=yes (unshare, setns and namespace flags of
clone are refused, clone3 answers ENOSYS so the C library falls back to clone, as systemd
arranges). Prints the settings it compiled.
"""

import argparse
import errno
import socket
import subprocess
import sys

import seccomp

NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
NAMESPACE_FLAGS |= 0x20000000 | 0x40000000 | 0x00000080  # NEWNS…NEWNET, NEWCGROUP, NEWTIME


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    service = read_service(args.unit)

    allowed, denied = set(), set()
    for line in service.get("SystemCallFilter", []):
        target = denied if line.startswith("~") else allowed
        for word in line.lstrip("~").split():
            target |= expand(word)
    allowed -= denied
    number = (service.get("SystemCallErrorNumber") or [None])[-1]
    refuse = seccomp.ERRNO(getattr(errno, number)) if number else seccomp.KILL_PROCESS
    if not allowed:
        sys.exit("the unit has no SystemCallFilter allow list")

    architectures = (service.get("SystemCallArchitectures") or ["native"])[-1]
    if architectures != "native":
        sys.exit(f"SystemCallArchitectures={architectures} is not emulated")
    restrict_namespaces = (service.get("RestrictNamespaces") or ["no"])[-1] == "yes"
    families = []
    for line in service.get("RestrictAddressFamilies", []):
        families += [getattr(socket, name) for name in line.split()]

    syscalls = seccomp.SyscallFilter(defaction=refuse)
    if restrict_namespaces:
        allowed -= {"unshare", "setns", "clone", "clone3"}
        no_namespace = seccomp.Arg(0, seccomp.MASKED_EQ, NAMESPACE_FLAGS, 0)
        syscalls.add_rule(seccomp.ALLOW, "clone", no_namespace)
        syscalls.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    if families:
        allowed.discard("socket")
        for family in families:
            syscalls.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, family))
    unknown = []
    for name in sorted(allowed):
        try:
            syscalls.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError):
            unknown.append(name)
    with open(args.out, "wb") as out:
        syscalls.export_bpf(out)
    print(
        f"seccomp: {len(allowed) - len(unknown)} calls allowed, others {number or 'kill'}; "
        f"native only; socket families {' '.join(sorted(f.name for f in families))}; "
        f"namespaces {'refused' if restrict_namespaces else 'allowed'}",
        file=sys.stderr,
    )


def read_service(path):
    """The [Service] settings, each as the list of its lines: systemd adds repeated keys up
    (which configparser refuses)."""
    values = {}
    section = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]":
                key, _, value = line.partition("=")
                values.setdefault(key.strip(), []).append(value.strip())
    return values


def expand(word):
    """A call's name, or every call of a @group, as systemd-analyze lists them."""
    if not word.startswith("@"):
        return {word}
    listing = subprocess.run(
        ["systemd-analyze", "syscall-filter", "--no-pager", word],
        capture_output=True, text=True, check=True,
    ).stdout
    out = set()
    for line in listing.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            out |= expand(line)
    return out


if __name__ == "__main__":
    main()
