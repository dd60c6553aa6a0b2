#!/usr/bin/env python3
"""Builds the kruntimes container images as OCI image archives, without a container engine.

Each image is the Depends closure of a few Debian packages (fetched with the host's apt
client into a private apt state, never installed on the host, cached by version under
~/.cache/kruntimes/debs/), its /etc/passwd and /etc/group, and one binary of the workspace
(built with cargo) or, for `pause`, a static C program. The layers are written straight from
the packages' data archives: sorted entries, the packages' own mtimes (what the builder
adds: the newest of them in a package layer, SOURCE_DATE_EPOCH — default the commit time of
HEAD — in the binary's layer and the config), owners numeric, gzip without a timestamp, so the
same binaries and package versions always give the same archive, byte for byte, and the
package layers stay the same from one commit to the next. Nothing is pulled: there is no base
image.

Usage (from anywhere; see docs/images.md):
  python3 images/build.py build [--only NAME,…] [--profile release|dev] [--tag T] …
  python3 images/build.py build --profile-use target/pgo-counts/merged.profdata  # bench/pgo.sh
  python3 images/build.py inspect ARCHIVE    # the reference, config and layers, as JSON
  python3 images/build.py unpack ARCHIVE DIR  # the root filesystem (as root: owners kept)
  python3 images/build.py lint                # the Dockerfiles agree with images.toml
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.dont_write_bytecode = True  # nothing written into images/
from builder.common import canonical, iso, log, run, sha256_file  # noqa: E402
from builder.debian import Apt, Deb  # noqa: E402
from builder.dockerfiles import lint  # noqa: E402
from builder.layers import Blob, Layer, compress  # noqa: E402
from builder.oci import read_archive, write_archive  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path(os.environ.get("KRUNTIMES_CACHE", Path.home() / ".cache" / "kruntimes"))
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# ---------------------------------------------------------------------------------------------
# The images


@dataclass
class Settings:
    """What every image of one build shares: its name parts, times and places."""

    registry: str
    repository: str
    tag: str
    epoch: int
    revision: str
    source: str
    out: Path
    target_dir: Path
    profile: str
    # The merged LLVM profile the Rust binaries are optimised with (bench/pgo.sh), if any.
    profile_use: Path | None = None


def reference(s: Settings, name: str) -> str:
    """REGISTRY/REPOSITORY/NAME:TAG, as the chart's "kruntimes.image" helper names images."""
    prefix = "/".join(p.strip("/") for p in (s.registry, s.repository) if p.strip("/"))
    return f"{prefix}/{name}:{s.tag}" if prefix else f"{name}:{s.tag}"


def passwd_group(spec: dict) -> tuple[bytes, bytes]:
    """/etc/passwd and /etc/group: root and the users of images.toml, none with a shell."""
    users = spec["users"]
    passwd = ["root:x:0:0:root:/root:/usr/sbin/nologin"]
    groups = {0: "root"}
    for name, u in sorted(users.items(), key=lambda kv: kv[1]["uid"]):
        passwd.append(f"{name}:x:{u['uid']}:{u['gid']}:kruntimes {name}:{u['home']}:/usr/sbin/nologin")
        groups.setdefault(u["gid"], name)
    group = [f"{g}:x:{gid}:" for gid, g in sorted(groups.items())]
    return ("\n".join(passwd) + "\n").encode(), ("\n".join(group) + "\n").encode()


def base_files(layer: Layer, spec: dict) -> None:
    """What every Debian-based image has besides its packages: the merged-/usr links,
    the users, name lookup through files then DNS, mount points, /tmp."""
    for top in ("bin", "sbin", "lib", "lib64"):
        layer.symlink(top, f"usr/{top}")
        layer.dir(f"usr/{top}")
    passwd, group = passwd_group(spec)
    layer.file("etc/passwd", passwd)
    layer.file("etc/group", group)
    layer.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
    for d in ("dev", "proc", "sys", "run", "root", "home", "var/lib/dpkg/status.d"):
        layer.dir(d, 0o700 if d == "root" else 0o755)
    layer.dir("tmp", 0o1777)
    layer.dir("var/tmp", 0o1777)


@dataclass(frozen=True)
class GroupLayer:
    """One package group's layer in one image: the packages it adds to the groups below."""

    group: str
    debs: tuple[Deb, ...]
    base: bool  # the first layer, which also holds base_files()


def plan_layers(name: str, img: dict, spec: dict, apt: Apt) -> list[GroupLayer]:
    """The image's package layers: group k holds the closure of groups 1..k minus what
    groups 1..k-1 hold, so images that start with the same groups get the same layers."""
    below: set[Deb] = set()
    names: list[str] = []
    plan = []
    for i, group in enumerate(img["groups"]):
        names += spec["groups"][group]
        closure = apt.resolve(names)
        lost = below - set(closure)
        if lost:
            log(f"{name}: group {group} resolves without {sorted(d.name for d in lost)} of the groups below it")
        own = tuple(d for d in closure if d not in below)
        plan.append(GroupLayer(group, own, i == 0))
        below |= set(own)
    return plan


def builder_digest() -> str:
    """The digest of the builder's own source: a change to it invalidates cached layers."""
    h = hashlib.sha256()
    for path in [Path(__file__), *sorted((HERE / "builder").glob("*.py"))]:
        h.update(path.read_bytes())
    return h.hexdigest()


def python_minor(debs: tuple[Deb, ...]) -> str | None:
    """The `3.11` of a group that brings python3.11-minimal, if it does."""
    for d in debs:
        m = re.fullmatch(r"python(3\.\d+)-minimal", d.name)
        if m:
            return m[1]
    return None


def group_blob(gl: GroupLayer, spec: dict, files: dict[Deb, Path], s: Settings) -> Blob:
    """The group's layer, from the cache when the same packages, users and builder made it
    before (the key covers all of them and this file's own text). It does not depend on the
    commit: the packages' files keep their own mtimes, and what this file adds takes the
    newest of them, so a new commit reuses the layer."""
    minor = python_minor(gl.debs)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    compile_pyc = minor is not None and minor == here
    if minor is not None and not compile_pyc:
        log(f"{gl.group}: the image's Python is {minor}, this interpreter {here}: no .pyc files "
            f"(run images/build.py with python{minor} to have them)")
    key = hashlib.sha256(canonical({
        "builder": builder_digest(),
        "debs": [(d.filename, sha256_file(files[d])) for d in gl.debs],
        "base": gl.base, "users": spec["users"] if gl.base else None,
        "pyc": sys.version if compile_pyc else None,
    })).hexdigest()
    cache = CACHE / "layers"
    meta, blob = cache / f"{key}.json", cache / f"{key}.tar.gz"
    if meta.is_file() and blob.is_file():
        m = json.loads(meta.read_text())
        data = blob.read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() == m["digest"]:
            return Blob(m["digest"], m["diff_id"], data, m["comment"], m["raw_size"])
    layer = Layer()
    if gl.base:
        base_files(layer, spec)
    for d in gl.debs:
        layer.add_deb(d, files[d])
    epoch = max(e.mtime for e in layer.entries.values() if e.mtime is not None)
    comment = f"debian packages ({gl.group}): " + " ".join(f"{d.name}={d.version}" for d in gl.debs)
    if compile_pyc:
        comment += f"; {layer.compile_python(epoch)} modules byte-compiled"
    b = compress(layer.tar(epoch), comment)
    cache.mkdir(parents=True, exist_ok=True)
    for path, content in ((blob, b.data), (meta, canonical({
            "digest": b.digest, "diff_id": b.diff_id, "comment": b.comment, "raw_size": b.raw_size}))):
        tmp = path.with_name(path.name + ".partial")
        tmp.write_bytes(content)
        tmp.replace(path)
    return b


def binary_blob(img: dict, binary: Path, s: Settings) -> Blob:
    """The image's own layer: its program and the directories it runs with."""
    top = Layer()
    if not img["groups"]:
        for d in ("dev", "proc", "sys"):
            top.dir(d)
    top.file(img["entrypoint"][0].lstrip("/"), binary.read_bytes(), 0o755)
    for d in img.get("dirs", []):
        top.dir(d["path"], d["mode"], d["uid"], d["gid"])
    if "package" in img:
        how = f"cargo profile {s.profile}" + (", profile-guided" if s.profile_use else "")
    elif "go" in img:
        how = f"go install {img['go']}"
    else:
        how = "gcc -static"
    return compress(top.tar(s.epoch), f"{img['binary']} ({how})")


def image_config(name: str, img: dict, s: Settings) -> dict:
    """The image's runtime configuration: user, entrypoint, arguments, environment, working
    directory and the OCI labels."""
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.description": img["description"],
        "org.opencontainers.image.version": s.tag,
        "org.opencontainers.image.revision": s.revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": iso(s.epoch),
        **({"org.opencontainers.image.source": s.source} if s.source else {}),
    }
    return {
        "User": img["user"],
        "Entrypoint": img["entrypoint"],
        **({"Cmd": img["cmd"]} if "cmd" in img else {}),
        # The commit the binaries were built from, which the gateway's /version reports.
        "Env": [f"PATH={DEFAULT_PATH}", f"KRUNTIMES_GIT_COMMIT={s.revision}"],
        "WorkingDir": img.get("workdir", "/"),
        "Labels": labels,
    }


# ---------------------------------------------------------------------------------------------
# Inputs: the spec, the binaries, the settings


def load_spec() -> dict:
    """images.toml."""
    with (HERE / "images.toml").open("rb") as f:
        return tomllib.load(f)


def cargo_metadata() -> dict:
    """The workspace's metadata: its target directory and package versions."""
    p = run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT, text=True)
    return json.loads(p.stdout)


# What bench/pgo.sh builds and trains (its `build` function); the profile-guided images
# build selects them too, so features resolve as they did for the counts.
PGO_PACKAGES = ("krt", "kruntimes-bench")


def build_binaries(images: dict, profile: str, target_dir: Path, skip_cargo: bool,
                   version: str, profile_use: Path | None = None) -> dict[str, Path]:
    """Every image's binary: `cargo build` of the workspace's (debug info stripped: the
    symbols stay, for backtraces), `gcc -static` of C sources and `go install` of Go modules
    (cached by module version). With `profile_use` the Rust binaries are optimised with that
    merged LLVM profile, in TARGET_DIR/pgo (bench/pgo.sh's, whose cache the same file reuses):
    other RUSTFLAGS would rebuild the plain target directory's every crate."""
    rust = {(img["package"], img["binary"]) for img in images.values() if "package" in img}
    env = None
    build_dir = target_dir
    if profile_use is not None:
        if profile == "dev":
            raise SystemExit("images: --profile-use needs an optimised profile, not dev")
        if not profile_use.is_file():
            raise SystemExit(f"images: {profile_use} is missing (bench/pgo.sh writes it)")
        build_dir = target_dir / "pgo"
        # bench/pgo.sh's optimised build's flags, relocations kept for BOLT included (the
        # copies below drop them): other flags would rebuild its every crate.
        env = {**os.environ, "CARGO_TARGET_DIR": str(build_dir),
               "RUSTFLAGS": f"-Cprofile-use={profile_use.resolve()} -Clink-arg=-Wl,--emit-relocs"}
    if rust and not skip_cargo:
        cmd = ["cargo", "build", "--locked", "--profile", profile]
        if profile == "dev":
            # The features `cargo test --workspace` resolves (dev-dependencies on): a build
            # of only these packages would resolve others, recompile a hundred crates, and
            # the next test run would recompile them back. So the dev binaries are those
            # the tests run, and the tests after this build compile nothing.
            cmd += ["--workspace", "--all-targets"]
        else:
            if profile_use is not None:
                # The packages bench/pgo.sh builds and trains. Cargo resolves features over
                # the packages a build selects, and a crate's features go into its symbol
                # names (`-C metadata`), which is how the counts find their functions: built
                # without these, kube-runtime, rustix and every crate above them resolve
                # otherwise and match no count, silently.
                cmd += [arg for package in PGO_PACKAGES for arg in ("-p", package)]
            for package, binary in sorted(rust):
                cmd += ["-p", package, "--bin", binary]
        log(" ".join(cmd))
        started = time.monotonic()
        if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
            raise SystemExit("images: cargo build failed")
        log(f"cargo build: {time.monotonic() - started:.0f} s")
    out_dir = build_dir / ("debug" if profile == "dev" else profile)
    # Copies, removed once the layers are written (cmd_build).
    stripped = target_dir / "images" / "bin"
    stripped.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, img in images.items():
        dest = stripped / img["binary"]
        if "package" in img:
            src = out_dir / img["binary"]
            if not src.is_file():
                raise SystemExit(f"images: {src} is missing (cargo build --profile {profile})")
            # Static relocations too (kept by the profile-guided build for BOLT): ~14 MB of krt.
            run(["objcopy", "--strip-debug", "--remove-relocations=*", str(src), str(dest)])
        elif "go" in img:
            shutil.copyfile(go_binary(img["go"], img["binary"]), dest)
        else:
            run(["gcc", "-static", "-O2", "-s", "-Wall", "-Werror", f'-DPAUSE_VERSION="{version}"',
                 f"-ffile-prefix-map={ROOT}=.", "-o", str(dest), str(HERE / img["source"])])
        paths[name] = dest
    return paths


def go_binary(module: str, binary: str) -> Path:
    """MODULE@VERSION's static binary, built by `go install` from the Go module proxy once per
    version and cached under CACHE/tools/."""
    path, _, version = module.partition("@")
    if not version:
        raise SystemExit(f"images: go module {module} has no @version")
    cached = CACHE / "tools" / f"{binary}-{version}" / binary
    if cached.is_file():
        return cached
    if shutil.which("go") is None:
        raise SystemExit(f"images: building {module} needs the go command")
    log(f"go install {module} (minutes on a cold Go cache)")
    started = time.monotonic()
    gobin = cached.parent / "partial"
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    env = {**os.environ, "GOBIN": str(gobin), "CGO_ENABLED": "0"}
    if subprocess.run(["go", "install", "-trimpath", "-ldflags", "-s -w", module], env=env).returncode != 0:
        raise SystemExit(f"images: go install {module} failed")
    (gobin / binary).replace(cached)
    gobin.rmdir()
    log(f"go install {module}: {time.monotonic() - started:.0f} s")
    return cached


def workspace_repository() -> str:
    """`repository` of the workspace's Cargo.toml (the images' source label)."""
    with (ROOT / "Cargo.toml").open("rb") as f:
        return tomllib.load(f).get("workspace", {}).get("package", {}).get("repository", "")


def git(*args: str) -> str:
    """git's output in the repository, or empty when git fails."""
    p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def cmd_build(a: argparse.Namespace) -> None:
    """`build`: every image (or `--only`) as an archive, and images.json beside them."""
    started = time.monotonic()
    spec = load_spec()
    images = spec["images"]
    if a.only:
        wanted = a.only.split(",")
        unknown = [n for n in wanted if n not in images]
        if unknown:
            raise SystemExit(f"images: unknown images {unknown}; known: {sorted(images)}")
        images = {n: images[n] for n in wanted}
    meta = cargo_metadata()
    target_dir = Path(meta["target_directory"])
    version = next(p["version"] for p in meta["packages"] if p["name"] == "kruntimes-operator")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct") or 0)
    s = Settings(
        registry=a.registry, repository=a.repository, tag=a.tag or version, epoch=epoch,
        revision=git("rev-parse", "HEAD") or "unknown",
        source=workspace_repository(),
        out=Path(a.out) if a.out else target_dir / "images", target_dir=target_dir,
        profile=a.profile, profile_use=a.profile_use,
    )
    binaries = build_binaries(images, a.profile, target_dir, a.no_cargo, s.tag, a.profile_use)
    plans: dict[str, list[GroupLayer]] = {n: [] for n in images}
    files: dict[Deb, Path] = {}
    if any(img["groups"] for img in images.values()):
        apt = Apt(CACHE / "apt", CACHE / "debs")
        apt.update(a.refresh)
        prefixes = sorted({tuple(n for g in img["groups"][:k + 1] for n in spec["groups"][g])
                           for img in images.values() for k in range(len(img["groups"]))})
        apt.resolve(list(prefixes[0]))  # writes the package cache the others then read
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda names: apt.resolve(list(names)), prefixes[1:]))
        plans = {n: plan_layers(n, img, spec, apt) for n, img in images.items()}
        files = apt.fetch([d for plan in plans.values() for gl in plan for d in gl.debs])
    assembled = time.monotonic()
    unique = sorted({gl for plan in plans.values() for gl in plan}, key=lambda gl: [d.filename for d in gl.debs])
    # zlib lets go of the GIL: the layers compress on both cores.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        group_blobs = dict(zip(unique, pool.map(lambda gl: group_blob(gl, spec, files, s), unique)))
        own_blobs = dict(zip(sorted(images), pool.map(
            lambda n: binary_blob(images[n], binaries[n], s), sorted(images))))
    summary = []
    for name in sorted(images):
        img = images[name]
        blobs = [group_blobs[gl] for gl in plans[name]] + [own_blobs[name]]
        ref = reference(s, name)
        path = s.out / f"{name}-{s.tag}.oci.tar"
        digests = write_archive(path, ref, s.tag, image_config(name, img, s), blobs, s.epoch)
        summary.append({
            "name": name, "ref": ref, "archive": str(path), "bytes": path.stat().st_size,
            "uncompressed": sum(b.raw_size for b in blobs),
            "packages": sorted(f"{d.name}={d.version}" for gl in plans[name] for d in gl.debs),
            "layers": [b.digest for b in blobs], **digests})
    (s.out / "images.json").write_text(json.dumps(summary, indent=2) + "\n")
    for r in summary:
        log(f"{r['ref']}: {r['archive']} ({r['bytes'] / 1e6:.1f} MB; {r['uncompressed'] / 1e6:.1f} MB "
            f"unpacked; {len(r['packages'])} packages; {r['manifest'][:19]})")
    shutil.rmtree(target_dir / "images" / "bin", ignore_errors=True)
    log(f"assembled in {time.monotonic() - assembled:.1f} s; total {time.monotonic() - started:.1f} s")


# ---------------------------------------------------------------------------------------------
# Reading archives back


def cmd_inspect(a: argparse.Namespace) -> None:
    """`inspect`: the reference, config and layers of an archive, every digest checked."""
    tf, desc, manifest, config = read_archive(Path(a.archive))
    layers = []
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"]):
        raw = gzip.decompress(tf.blob(layer["digest"]))  # type: ignore[attr-defined]
        if "sha256:" + hashlib.sha256(raw).hexdigest() != diff_id:
            raise SystemExit(f"images: {a.archive}: layer {layer['digest']} does not match its diff id")
        layers.append({"digest": layer["digest"], "size": layer["size"], "uncompressed": len(raw)})
    json.dump({"ref": desc["annotations"]["io.containerd.image.name"], "manifest": desc["digest"],
               "config": config["config"], "layers": layers}, sys.stdout, indent=2)
    print()


def cmd_unpack(a: argparse.Namespace) -> None:
    """`unpack`: the layers extracted in order into a directory."""
    tf, _, manifest, _ = read_archive(Path(a.archive))
    dest = Path(a.dir)
    dest.mkdir(parents=True, exist_ok=True)
    for layer in manifest["layers"]:
        data = gzip.decompress(tf.blob(layer["digest"]))  # type: ignore[attr-defined]
        with tarfile.open(fileobj=io.BytesIO(data)) as lt:
            for m in lt:
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise SystemExit(f"images: unsafe path {m.name}")
                target = dest / m.name
                if target.is_symlink() or (target.exists() and not target.is_dir()):
                    target.unlink()
                lt.extract(m, dest, set_attrs=True, numeric_owner=True)


def cmd_lint(_: argparse.Namespace) -> None:
    """`lint`: the Dockerfiles against images.toml."""
    problems, bases = lint(load_spec(), HERE)
    for p in problems:
        print(f"lint: {p}", file=sys.stderr)
    if problems:
        raise SystemExit(1)
    print(f"lint: {len(load_spec()['images'])} Dockerfiles agree with images.toml (final base {', '.join(sorted(bases))})")


def main() -> None:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image archives")
    b.add_argument("--only", help="comma-separated image names (default: every image)")
    b.add_argument("--profile", default="release", help="cargo profile of the binaries (release, dev)")
    b.add_argument("--registry", default="ghcr.io", help="the chart's image.registry")
    b.add_argument("--repository", default="kruntimes", help="the chart's image.repository")
    b.add_argument("--tag", default="", help="image tag (default: the workspace version, the chart's appVersion)")
    b.add_argument("--out", help="output directory (default: TARGET_DIR/images)")
    b.add_argument("--no-cargo", action="store_true", help="use the binaries already built")
    b.add_argument("--profile-use", type=Path, metavar="PROFDATA",
                   help="optimise the Rust binaries with this merged LLVM profile (bench/pgo.sh)")
    b.add_argument("--refresh", action="store_true", help="refresh the private apt lists now")
    b.set_defaults(func=cmd_build)
    i = sub.add_parser("inspect", help="print an archive's reference, config and layers")
    i.add_argument("archive")
    i.set_defaults(func=cmd_inspect)
    u = sub.add_parser("unpack", help="unpack an archive's root filesystem into a directory")
    u.add_argument("archive")
    u.add_argument("dir")
    u.set_defaults(func=cmd_unpack)
    sub.add_parser("lint", help="check the Dockerfiles against images.toml").set_defaults(func=cmd_lint)
    a = ap.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
