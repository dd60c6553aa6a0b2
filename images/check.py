#!/usr/bin/env python3
"""Checks the image archives images/build.py wrote, in a real containerd and runc.

For every archive in TARGET_DIR/images/images.json (the last build): its config agrees with
images.toml (non-root numeric user, entrypoint, command, working directory); `ctr images
import` takes it under the digest the build printed; `ctr run` of its entrypoint with `--help`
(`-v` for pause) exits 0 with the binary's usage, as the chart runs it — read-only root
filesystem, every capability dropped, the default seccomp profile, the image's own user;
the image's extra commands (python3, bash and the tools) print what images.toml expects; and
the images marked `serve` start as in a Runtime Pod and stop on SIGTERM with exit 0 (the
Runtime Servers create their socket with mode 660 in a mounted directory first). The
Dockerfiles are linted against images.toml too.

containerd: the system's (/run/containerd/containerd.sock) when it answers, else a private
one with its own root, state and socket in a temporary directory, stopped at the end. Every
container, image and namespace the check made is removed. Ends with
`images: N passed, M failed` and exits non-zero on any failure.

Usage: python3 images/check.py [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # nothing written into images/
sys.path.insert(0, str(HERE))
import build  # noqa: E402  (the builder beside this file: spec, archive reader, lint)

NAMESPACE = "kruntimes-test"
SYSTEM_SOCKET = "/run/containerd/containerd.sock"


class Containerd:
    """A containerd to talk to through `ctr`: the system's, or a private one."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.proc: subprocess.Popen | None = None
        if self._answers(SYSTEM_SOCKET):
            self.address = SYSTEM_SOCKET
            return
        root = tmp / "containerd"
        self.address = str(root / "containerd.sock")
        config = root / "config.toml"
        root.mkdir(parents=True)
        config.write_text(f"""version = 2
root = "{root / 'root'}"
state = "{root / 'state'}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.address}"
[ttrpc]
  address = "{self.address}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
""")
        self.log = (root / "containerd.log").open("w")
        self.proc = subprocess.Popen(["containerd", "--config", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self._answers(self.address):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"check: containerd did not start:\n{(root / 'containerd.log').read_text()[-3000:]}")
            time.sleep(0.2)

    @staticmethod
    def _answers(address: str) -> bool:
        """Whether a containerd answers on `address`."""
        if not Path(address).exists():
            return False
        p = subprocess.run(["ctr", "-a", address, "version"], capture_output=True, timeout=10)
        return p.returncode == 0

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """`ctr` in the test namespace; a non-zero exit is a Failure when `check`."""
        p = subprocess.run(["ctr", "-a", self.address, "-n", NAMESPACE, *args], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise Failure(f"ctr {' '.join(args[:3])}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
        return p

    def clean(self) -> None:
        """Removes every task, container and image of the namespace, then the namespace;
        stops a private containerd."""
        try:
            for line in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", line, check=False)
                time.sleep(0.5)
                self.ctr("tasks", "delete", "-f", line, check=False)
            for line in self.ctr("containers", "ls", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", line, check=False)
            images = self.ctr("images", "ls", "-q", check=False).stdout.split()
            if images:
                self.ctr("images", "rm", "--sync", *images, check=False)
            # Leases and unreferenced content go with the namespace's garbage collection.
            subprocess.run(["ctr", "-a", self.address, "namespaces", "rm", NAMESPACE],
                           capture_output=True, timeout=60)
        finally:
            if self.proc is not None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                self.log.close()


class Failure(Exception):
    """A check that did not hold, with what was seen."""
    pass


class Tally:
    """Passed and failed checks, each printed as it ends."""
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def run(self, what: str, fn, *args) -> bool:
        """Runs one check; a Failure, timeout or OS error fails it."""
        started = time.monotonic()
        try:
            fn(*args)
        except (Failure, subprocess.TimeoutExpired, AssertionError, OSError) as e:
            self.failed.append(what)
            print(f"FAIL {what}: {e}", flush=True)
            return False
        self.passed += 1
        print(f"ok   {what} ({time.monotonic() - started:.1f} s)", flush=True)
        return True


def check_dockerfiles() -> None:
    """The Dockerfiles agree with images.toml."""
    problems, _ = build.lint(build.load_spec(), build.HERE)
    if problems:
        raise Failure("; ".join(problems))


def check_config(archive: Path, name: str, img: dict, built: dict) -> None:
    """The archive's config is what images.toml and the build said."""
    _, desc, manifest, config = build.read_archive(archive)
    c = config["config"]
    if desc["digest"] != built["manifest"]:
        raise Failure(f"manifest {desc['digest']}, the build printed {built['manifest']}")
    if desc["annotations"]["io.containerd.image.name"] != built["ref"]:
        raise Failure(f"named {desc['annotations']}, expected {built['ref']}")
    uid, _, gid = c["User"].partition(":")
    if not (uid.isdigit() and gid.isdigit() and int(uid) != 0):
        raise Failure(f"user {c['User']!r} is not a numeric non-root uid:gid")
    for key, want in (("User", img["user"]), ("Entrypoint", img["entrypoint"]),
                      ("Cmd", img.get("cmd")), ("WorkingDir", img.get("workdir", "/"))):
        if c.get(key) != want:
            raise Failure(f"{key} is {c.get(key)!r}, images.toml says {want!r}")
    if len(manifest["layers"]) != len(img["groups"]) + 1:
        raise Failure(f"{len(manifest['layers'])} layers for {len(img['groups'])} package groups")


def check_import(ctd: Containerd, archive: Path, built: dict) -> None:
    """`ctr images import` takes the archive under the manifest digest of the build."""
    ctd.ctr("images", "import", str(archive), timeout=300)
    listed = ctd.ctr("images", "ls").stdout.splitlines()[1:]
    rows = {cols[0]: cols[2] for cols in (l.split() for l in listed) if len(cols) > 2}
    if rows.get(built["ref"]) != built["manifest"]:
        raise Failure(f"{built['ref']} not imported under {built['manifest']}: {rows}")


# What the chart's and the operator's security contexts ask of every container: a read-only
# root filesystem, the default seccomp profile, no capability (ctr 1.6 takes no `ALL`: each of
# its default set by name).
DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
                "NET_BIND_SERVICE", "NET_RAW", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP"]
RESTRICTED = ["--read-only", "--seccomp", *[a for c in DEFAULT_CAPS for a in ("--cap-drop", f"CAP_{c}")]]


def run_in(ctd: Containerd, built: dict, cid: str, args: list[str], timeout: float = 60) -> str:
    """Runs `args` in the image as the chart runs its containers; their output."""
    p = ctd.ctr("run", "--rm", *RESTRICTED, built["ref"], cid, *args, timeout=timeout, check=False)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise Failure(f"{args}: exit {p.returncode}: {out.strip()[-800:]}")
    return out


def check_help(ctd: Containerd, name: str, img: dict, built: dict) -> None:
    """The entrypoint's usage, exit 0."""
    args = img["entrypoint"] + img.get("help_args", ["--help"])
    out = run_in(ctd, built, f"{name}-help", args)
    wanted = [img["help"]] + ([f"Usage: {img['binary']}"] if "package" in img else [])
    missing = [w for w in wanted if w not in out]
    if missing:
        raise Failure(f"{args} printed no {missing}: {out.strip()[:600]}")


def check_command(ctd: Containerd, name: str, i: int, built: dict, check: dict) -> None:
    """One of images.toml's extra commands prints what it expects."""
    out = run_in(ctd, built, f"{name}-cmd-{i}", check["args"])
    if check["expect"] not in out:
        raise Failure(f"{check['args']} printed {out.strip()[:600]!r}, expected {check['expect']!r}")


def check_serve(ctd: Containerd, name: str, img: dict, built: dict, tmp: Path) -> None:
    """Starts the image's entrypoint with its default arguments as in a Pod — the mounted
    socket directory, workspace and /tmp — waits for the Runtime Server's socket (or a
    second of life, for pause), then stops it with SIGTERM: exit 0, socket removed."""
    uid, gid = (int(x) for x in img["user"].partition(":")[::2])
    mounts = []
    socket = None
    if "cmd" in img:
        base = tmp / f"{name}-pod"
        dirs = {"run/kruntimes": (0o770, 65532), "workspace": (0o750, uid), "tmp": (0o1777, 0)}
        for d, (mode, owner) in dirs.items():
            host = base / d
            host.mkdir(parents=True)
            os.chown(host, owner, gid if owner else 0)
            host.chmod(mode)
            mounts += ["--mount", f"type=bind,src={host},dst=/{d},options=rbind:rw"]
        socket = base / "run/kruntimes/runtime.sock"
    cid = f"{name}-serve"
    proc = subprocess.Popen(
        ["ctr", "-a", ctd.address, "-n", NAMESPACE, "run", "--rm", *RESTRICTED, *mounts,
         built["ref"], cid], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        if socket is None:
            time.sleep(1)
        while socket is not None and not socket.is_socket():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Failure(f"no socket {socket}: {(proc.communicate()[0] if proc.poll() is not None else 'still starting')[-800:]}")
            time.sleep(0.1)
        if proc.poll() is not None:
            raise Failure(f"exited {proc.returncode} before SIGTERM: {proc.communicate()[0][-800:]}")
        if socket is not None and stat.S_IMODE(socket.stat().st_mode) != 0o660:
            raise Failure(f"socket mode {oct(socket.stat().st_mode)}, not 0660")
        ctd.ctr("tasks", "kill", "-s", "SIGTERM", cid)
        out, _ = proc.communicate(timeout=20)
        if proc.returncode != 0:
            raise Failure(f"exit {proc.returncode} on SIGTERM: {out[-800:]}")
        if socket is not None and socket.exists():
            raise Failure(f"{socket} left behind")
    finally:
        if proc.poll() is None:
            ctd.ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
            proc.wait(timeout=20)


def main() -> None:
    """Every check over the last build's archives; exit 1 on any failure."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="the build's output directory (default: TARGET_DIR/images)")
    ap.add_argument("--keep", action="store_true", help="keep the images imported (system containerd)")
    a = ap.parse_args()
    out = Path(a.dir) if a.dir else Path(build.cargo_metadata()["target_directory"]) / "images"
    summary = json.loads((out / "images.json").read_text())
    spec = build.load_spec()
    tally = Tally()
    started = time.monotonic()
    tally.run("Dockerfiles agree with images.toml", check_dockerfiles)
    tmp = Path(tempfile.mkdtemp(prefix="kruntimes-images-"))
    ctd = Containerd(tmp)
    print(f"containerd: {ctd.address} ({'private' if ctd.proc else 'system'}), namespace {NAMESPACE}", flush=True)
    try:
        for built in summary:
            name = built["name"]
            img = spec["images"][name]
            archive = Path(built["archive"])
            tally.run(f"{name}: config", check_config, archive, name, img, built)
            if not tally.run(f"{name}: ctr images import", check_import, ctd, archive, built):
                continue
            tally.run(f"{name}: {' '.join(img['entrypoint'] + img.get('help_args', ['--help']))}",
                      check_help, ctd, name, img, built)
            for i, c in enumerate(img.get("checks", [])):
                tally.run(f"{name}: {c.get('what', c['args'][0] + ' runs')}", check_command, ctd,
                          name, i, built, c)
            if img.get("serve"):
                tally.run(f"{name}: serves and stops on SIGTERM", check_serve, ctd, name, img, built, tmp)
    finally:
        if not (a.keep and ctd.proc is None):
            ctd.clean()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"image checks: {time.monotonic() - started:.0f} s")
    print(f"images: {tally.passed} passed, {len(tally.failed)} failed")
    sys.exit(1 if tally.failed else 0)


if __name__ == "__main__":
    main()
