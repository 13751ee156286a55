#!/usr/bin/env python3
"""Builds a Containerfile into a directory tree, for machines where containers cannot run.

Each stage starts from a copy of the tree its FROM image names (`--image NAME=TREE`); RUN
steps run as root in a chroot of the stage's tree (in a mount namespace of their own, with
/proc and /dev), with the stage's ARG and ENV values in their environment; COPY copies from
the build context or, with --from, from an earlier stage's tree. The last stage's tree is
written to OUT/rootfs and what a container engine would run it with (environment, working
directory, user, entry point, command, health check, volumes, stop signal) to
OUT/config.json. Only the instructions Keel's Containerfile uses are understood; any other
stops the build.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--context", required=True)
    parser.add_argument("--image", action="append", default=[], help="NAME=TREE")
    parser.add_argument("--build-arg", action="append", default=[], help="NAME=VALUE")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    images = dict(pair.split("=", 1) for pair in args.image)
    build_args = dict(pair.split("=", 1) for pair in args.build_arg)
    with open(args.file, encoding="utf-8") as f:
        instructions = parse(f.read())
    Builder(images, build_args, args.context, args.out).build(instructions)


def parse(text):
    """(INSTRUCTION, rest) pairs: comments dropped, continued lines joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def substitute(text, values):
    """${NAME} and $NAME from values, as FROM, WORKDIR, COPY and ENV expand them."""

    def one(match):
        name = match.group(1) or match.group(2)
        return values.get(name, "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, text)


def exec_form(rest):
    """An instruction's argument list: JSON (exec form) or a shell command (shell form)."""
    if rest.startswith("["):
        return json.loads(rest)
    return ["/bin/sh", "-c", rest]


class Stage:
    def __init__(self, name, tree):
        self.name, self.tree = name, tree
        self.args, self.env = {}, {"PATH": DEFAULT_PATH}
        self.workdir, self.user = "/", "root"
        self.config = {"volumes": [], "stop_signal": "SIGTERM", "healthcheck": None}
        self.config.update(entrypoint=[], cmd=[], expose=[])


class Builder:
    def __init__(self, images, build_args, context, out):
        self.images, self.build_args = images, build_args
        self.context, self.out = os.path.abspath(context), os.path.abspath(out)
        self.global_args = {}
        self.stages = []

    def build(self, instructions):
        if os.path.exists(self.out):
            shutil.rmtree(self.out)
        os.makedirs(self.out)
        for word, rest in instructions:
            handler = getattr(self, "do_" + word.lower(), None)
            if handler is None:
                sys.exit(f"containerfile.py: {word} is not understood")
            handler(rest)
        last = self.stages[-1]
        os.rename(last.tree, os.path.join(self.out, "rootfs"))
        for stage in self.stages[:-1]:
            shutil.rmtree(stage.tree)
        config = dict(last.config, env=last.env, workdir=last.workdir, user=last.user)
        with open(os.path.join(self.out, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)

    @property
    def stage(self):
        return self.stages[-1]

    def values(self):
        return {**self.stage.args, **self.stage.env}

    def do_arg(self, rest):
        name, has_default, default = rest.partition("=")
        value = self.build_args.get(name, default if has_default else "")
        if not self.stages:
            self.global_args[name] = value
        else:
            self.stage.args[name] = self.build_args.get(name, self.global_args.get(name, value))

    def do_from(self, rest):
        parts = rest.split()
        image = substitute(parts[0], self.global_args)
        name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(self.stages))
        source = self.images.get(image)
        if source is None:
            sys.exit(f"containerfile.py: no tree for image {image} (--image {image}=TREE)")
        tree = os.path.join(self.out, f"stage-{len(self.stages)}")
        subprocess.run(["cp", "-a", "--reflink=auto", source, tree], check=True)
        for leftover in (".complete",):
            path = os.path.join(tree, leftover)
            if os.path.exists(path):
                os.remove(path)
        self.stages.append(Stage(name, tree))

    def do_workdir(self, rest):
        self.stage.workdir = os.path.join(self.stage.workdir, substitute(rest, self.values()))
        os.makedirs(self.path(self.stage.workdir), exist_ok=True)

    def do_env(self, rest):
        for pair in shlex.split(rest):
            name, _, value = pair.partition("=")
            self.stage.env[name] = substitute(value, self.values())

    def do_copy(self, rest):
        words = shlex.split(rest)
        source_root = self.context
        while words[0].startswith("--"):
            option = words.pop(0)
            if option.startswith("--from="):
                stage = option.split("=", 1)[1]
                source_root = next(s.tree for s in self.stages if s.name == stage)
            else:
                sys.exit(f"containerfile.py: COPY {option} is not understood")
        *sources, dest = [substitute(w, self.values()) for w in words]
        dest = os.path.join(self.stage.workdir, dest)
        for source in sources:
            path = os.path.join(source_root, source.lstrip("/"))
            target = self.path(dest)
            if os.path.isdir(path):
                os.makedirs(target, exist_ok=True)
                subprocess.run(["cp", "-a", f"{path}/.", target], check=True)
            else:
                if dest.endswith("/") or os.path.isdir(target):
                    target = os.path.join(target, os.path.basename(path))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(path, target)

    def do_run(self, rest):
        env = {**self.stage.args, **self.stage.env}
        script = f"cd {shlex.quote(self.stage.workdir)} && {rest}"
        chroot_run(self.stage.tree, ["/bin/sh", "-c", script], env)

    def do_volume(self, rest):
        self.stage.config["volumes"] += exec_form(rest) if rest.startswith("[") else rest.split()

    def do_user(self, rest):
        self.stage.user = rest

    def do_expose(self, rest):
        self.stage.config["expose"] += rest.split()

    def do_stopsignal(self, rest):
        self.stage.config["stop_signal"] = rest

    def do_healthcheck(self, rest):
        options, _, command = rest.partition("CMD ")
        self.stage.config["healthcheck"] = {"options": options.split(), "cmd": exec_form(command)}

    def do_entrypoint(self, rest):
        self.stage.config["entrypoint"] = exec_form(rest)

    def do_cmd(self, rest):
        self.stage.config["cmd"] = exec_form(rest)

    def path(self, inside):
        return os.path.join(self.stage.tree, inside.lstrip("/"))


def chroot_run(tree, argv, env):
    """argv as root in a chroot of tree, in a mount namespace with /proc and /dev."""
    mounts = (
        f"mount -t proc proc {shlex.quote(tree)}/proc && "
        f"mount --rbind /dev {shlex.quote(tree)}/dev && "
        f"exec chroot {shlex.quote(tree)} env -i "
        + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        + " "
        + " ".join(shlex.quote(a) for a in argv)
    )
    subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", mounts],
        check=True,
    )


if __name__ == "__main__":
    main()
