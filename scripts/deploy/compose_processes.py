#!/usr/bin/env python3
"""Starts the services of compose files as processes, for machines without containers.

Run inside network and mount namespaces of their own (compose.sh does): every service gets a
loopback address of its own under its name (/etc/hosts is replaced in this mount namespace),
so the definitions' host names and ports hold as they are. What each image is stands in
`--image NAME=KIND`: `keel` (this checkout's keel binary, with the image's `serve` command,
working directory /data and KEEL_LISTEN on the service's address), `services` (the stand-in
of scripts/deploy/services.Containerfile: its entry point runs PostgreSQL as the official
image would, or the service's command, such as Caddy). Environment (`environment`,
`env_file`, ${VAR} from the project's .env), commands, volumes (bind mounts of files,
named volumes as directories shared by the services that mount them) and published ports
(forwarded from 127.0.0.1) follow the definitions.

  compose_processes.py up --state DIR -f compose.yaml [-f more.yaml] --image ...   # detaches
  compose_processes.py up --only SERVICE ...                  # one service again, detached
  compose_processes.py run --state DIR -f ... --image ... -- SERVICE ARGS...       # one-off

`up` writes DIR/SERVICE.pid and DIR/SERVICE.ip and DIR/SERVICE.log.
"""

import argparse
import os
import re
import shlex
import socket
import subprocess
import sys
import threading

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KEEL_PORT = 8700


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "run", "forward"])
    parser.add_argument("--state", required=True)
    parser.add_argument("-f", dest="files", action="append", default=[])
    parser.add_argument("--image", action="append", default=[], help="IMAGE=keel|services")
    parser.add_argument("--only", help="up: start this service alone (again)")
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(rest) - (1 if "--" in argv else 0)])
    args.rest = rest
    if args.action == "forward":
        forward(*args.rest)
        return
    project = Project(args.files, dict(pair.split("=", 1) for pair in args.image), args.state)
    if args.action == "up" and args.only:
        project.start(args.only)
    elif args.action == "up":
        project.up()
    else:
        service, *command = args.rest
        sys.exit(project.run(service, command))


class Project:
    def __init__(self, files, images, state):
        self.dir = os.path.dirname(os.path.abspath(files[0]))
        self.env = dict(os.environ)
        self.env.update(read_env_file(os.path.join(self.dir, ".env")))
        self.services, self.volumes = {}, {}
        for path in files:
            with open(path, encoding="utf-8") as f:
                data = substitute(yaml.safe_load(f), self.env)
            for name, service in (data.get("services") or {}).items():
                self.services.setdefault(name, {}).update(service)
        self.images, self.state = images, os.path.abspath(state)
        os.makedirs(self.state, exist_ok=True)
        self.addresses = {
            name: f"127.0.0.{10 + i}" for i, name in enumerate(sorted(self.services))
        }

    def up(self):
        self.write_hosts()
        for name in self.order():
            self.start(name)

    def write_hosts(self):
        hosts = os.path.join(self.state, "hosts")
        with open(hosts, "w", encoding="utf-8") as f:
            f.write("127.0.0.1 localhost\n")
            for name, address in self.addresses.items():
                f.write(f"{address} {name}\n")
        subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)

    def order(self):
        done, out = set(), []

        def visit(name):
            if name in done:
                return
            done.add(name)
            for dependency in depends_on(self.services[name]):
                visit(dependency)
            out.append(name)

        for name in sorted(self.services):
            visit(name)
        return out

    def start(self, name):
        argv, env, cwd = self.process(name, None)
        log = open(os.path.join(self.state, f"{name}.log"), "ab")
        child = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=log, stderr=log, start_new_session=True
        )
        with open(os.path.join(self.state, f"{name}.pid"), "w", encoding="utf-8") as f:
            f.write(str(child.pid))
        with open(os.path.join(self.state, f"{name}.ip"), "w", encoding="utf-8") as f:
            f.write(self.addresses[name])
        for published, inner in ports(self.services[name]):
            subprocess.Popen(
                [sys.executable, __file__, "forward", "--state", self.state, "--",
                 f"127.0.0.1:{published}", f"{self.addresses[name]}:{inner}"],
                stdout=log, stderr=log, start_new_session=True,
            )
        print(f"started {name} (pid {child.pid}) at {self.addresses[name]}", file=sys.stderr)

    def run(self, name, command):
        argv, env, cwd = self.process(name, command)
        return subprocess.run(argv, env=env, cwd=cwd, check=False).returncode

    def process(self, name, command):
        """The argv, environment and working directory standing in for the container."""
        service = self.services[name]
        kind = self.images.get(service["image"])
        if kind is None:
            sys.exit(f"no stand-in for image {service['image']} (--image IMAGE=KIND)")
        home = self.volume_dir(f"{name}-home")
        env = {"PATH": os.environ["PATH"], "HOME": home, "LANG": "C.UTF-8"}
        for env_file in as_list(service.get("env_file")):
            env.update(read_env_file(os.path.join(self.dir, env_file)))
        env.update(environment(service))
        mounts = self.mounts(name, service)
        command = command if command is not None else service.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        if kind == "keel":
            data = self.volume_dir(f"{name}-data")
            for target, source in mounts.items():
                if target.startswith("/data/"):
                    bind(source, os.path.join(data, target[len("/data/"):]))
            env["KEEL_LISTEN"] = f"{self.addresses[name]}:{KEEL_PORT}"
            argv = [os.environ["KEEL"]] + (command or ["serve"])
            cwd = data
        elif kind == "services":
            env.setdefault("PGDATA", "/var/lib/postgresql/data")
            env["PATH"] = postgres_bin() + ":" + env["PATH"]
            argv = ["/bin/sh", os.path.join(HERE, "postgres-entrypoint.sh")] + (
                command or ["postgres"]
            )
            cwd = self.dir
        else:
            sys.exit(f"unknown stand-in {kind}")
        # Paths inside the container become the host paths mounted there.
        env = {k: mounts.get(v, v) for k, v in env.items()}
        for target, source in mounts.items():
            if target == env.get("PGDATA"):
                env["PGDATA"] = source
        argv = [mounts.get(arg, arg) for arg in argv]
        return argv, env, cwd

    def mounts(self, name, service):
        """Container path -> host path for each volume of the service."""
        out = {}
        for volume in as_list(service.get("volumes")):
            source, target = volume.split(":")[:2]
            if source.startswith((".", "/")):
                out[target] = os.path.normpath(os.path.join(self.dir, source))
            else:
                out[target] = self.volume_dir(source)
        return out

    def volume_dir(self, volume):
        path = os.path.join(self.state, "volumes", volume)
        os.makedirs(path, exist_ok=True)
        return path


def bind(source, target):
    os.makedirs(target, exist_ok=True)
    subprocess.run(["mount", "--bind", source, target], check=True)


def postgres_bin():
    versions = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: int(v))
    return f"/usr/lib/postgresql/{versions[-1]}/bin"


def depends_on(service):
    value = service.get("depends_on") or []
    return list(value) if isinstance(value, (list, dict)) else [value]


def environment(service):
    value = service.get("environment") or {}
    if isinstance(value, list):
        value = dict(item.split("=", 1) for item in value)
    return {k: "" if v is None else str(v) for k, v in value.items()}


def ports(service):
    out = []
    for port in as_list(service.get("ports")):
        parts = str(port).split(":")
        out.append((parts[-2], parts[-1]))
    return out


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def read_env_file(path):
    out = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    name, _, value = line.partition("=")
                    out[name.strip()] = value.strip()
    return out


VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:?\?)([^}]*))?\}")


def substitute(value, env):
    """${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error} and $$, as
    compose files write them."""
    if isinstance(value, dict):
        return {k: substitute(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match):
        if match.group(0) == "$$":
            return "$"
        name, dash, default, question, error = match.groups()
        current = env.get(name)
        empty = current is None or (current == "" and (dash or question or "").startswith(":"))
        if dash and empty:
            return default
        if question and empty:
            sys.exit(f"compose: {name}: {error}")
        return current or ""

    return VARIABLE.sub(one, value)


def forward(listen, target):
    """Forwards TCP from listen (HOST:PORT) to target, as a published port does."""
    host, port = listen.rsplit(":", 1)
    server = socket.create_server((host, int(port)))
    target_host, target_port = target.rsplit(":", 1)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((target_host, int(target_port)))
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def pipe(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


if __name__ == "__main__":
    main()
