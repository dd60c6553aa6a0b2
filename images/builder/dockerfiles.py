"""The Dockerfiles beside images.toml, checked against it: they build the same images with
Docker, which these machines do not have, so only their text can be compared."""

from __future__ import annotations

import json
import re
from pathlib import Path


def final_stage(path: Path) -> list[str]:
    """The instructions of the Dockerfile's last stage, continuation lines joined, comments
    and blank lines left out."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    last_from = max(i for i, l in enumerate(lines) if l.upper().startswith("FROM "))
    return lines[last_from:]


def last(stage: list[str], word: str) -> str | None:
    """The argument of the stage's last `word` instruction (what takes effect)."""
    found = [l[len(word):].strip() for l in stage if l.upper().startswith(word + " ")]
    return found[-1] if found else None


def same(got: str | None, want: str) -> bool:
    """Whether an instruction's argument is `want`: JSON arrays compared as arrays."""
    if got is None:
        return False
    if want.startswith("["):
        return got.startswith("[") and json.loads(got) == json.loads(want)
    return got == want


def lint(spec: dict, here: Path) -> tuple[list[str], set[str]]:
    """What in the Dockerfiles under `here` disagrees with `spec` (images.toml): the final
    stage's USER, ENTRYPOINT, CMD, WORKDIR and the COPY of the binary; and the final stages'
    base images, which must be one (images without packages, such as pause, aside)."""
    problems = []
    bases = set()
    for name, img in spec["images"].items():
        path = here / name / "Dockerfile"
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        stage = final_stage(path)
        if img["groups"]:
            bases.add(stage[0].split()[1])
        expect = {"USER": img["user"], "ENTRYPOINT": json.dumps(img["entrypoint"])}
        if "cmd" in img:
            expect["CMD"] = json.dumps(img["cmd"])
        if "workdir" in img:
            expect["WORKDIR"] = img["workdir"]
        for word, want in expect.items():
            got = last(stage, word)
            if not same(got, want):
                problems.append(f"{path}: {word} is {got!r}, images.toml says {want!r}")
        dest = img["entrypoint"][0]
        if not any(l.upper().startswith("COPY ") and l.endswith(" " + dest) for l in stage):
            problems.append(f"{path}: the final stage does not COPY its binary to {dest}")
    if len(bases) > 1:
        problems.append(f"the final stages use different base images: {sorted(bases)}")
    return problems, bases
