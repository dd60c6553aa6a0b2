"""The OCI image layout in one tar (oci-layout, index.json, blobs/sha256/, and Docker's
manifest.json), written reproducibly and read back with every digest checked."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from .common import canonical, iso
from .layers import Blob


def write_archive(path: Path, ref: str, tag: str, image_config: dict, blobs: list[Blob],
                  epoch: int) -> dict:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/) in one tar, plus Docker's
    manifest.json so `docker load` of older engines takes it too. `ref` is the full name
    (io.containerd.image.name), `tag` the ref.name; returns the manifest and config digests."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": iso(epoch),
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in blobs]},
        "history": [{"created": iso(epoch), "created_by": f"images/build.py: {b.comment}"}
                    for b in blobs],
    }
    config_bytes = canonical(config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": b.digest, "size": len(b.data)} for b in blobs],
        "annotations": {"org.opencontainers.image.created": iso(epoch)},
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }
    docker = [{"Config": f"blobs/sha256/{config_digest[7:]}", "RepoTags": [ref],
               "Layers": [f"blobs/sha256/{b.digest[7:]}" for b in blobs]}]
    files = {
        "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical(index),
        "manifest.json": canonical(docker),
        f"blobs/sha256/{config_digest[7:]}": config_bytes,
        f"blobs/sha256/{manifest_digest[7:]}": manifest_bytes,
        **{f"blobs/sha256/{b.digest[7:]}": b.data for b in blobs},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d + "/")
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, epoch
            tf.addfile(ti)
        for name in sorted(files):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(files[name]), 0o644, epoch
            tf.addfile(ti, io.BytesIO(files[name]))
    tmp.replace(path)
    return {"manifest": manifest_digest, "config": config_digest}


def read_archive(path: Path) -> tuple[tarfile.TarFile, dict, dict, dict]:
    """The archive, its index entry, manifest and config; `tf.blob(digest)` reads a blob and
    checks it against its digest."""
    tf = tarfile.open(path)

    def blob(digest: str) -> bytes:
        f = tf.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
        assert f is not None
        data = f.read()
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"images: {path}: blob {digest} does not match its digest")
        return data

    f = tf.extractfile("index.json")
    assert f is not None
    index = json.load(f)
    desc = index["manifests"][0]
    manifest = json.loads(blob(desc["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    tf.blob = blob  # type: ignore[attr-defined]
    return tf, desc, manifest, config
