"""Starts a real `krt up` stack for the SDK tests (KRT_BIN names the binary)."""

import os
import subprocess
import time

import pytest


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    krt = os.environ.get("KRT_BIN")
    if not krt:
        pytest.fail("KRT_BIN must name the krt binary (the cargo test that runs this suite sets it)")
    base = tmp_path_factory.mktemp("krt")
    state, runs = base / "state", base / "runs"
    runs.mkdir()
    port = os.environ.get("KRT_GATEWAY_PORT", "18643")
    proc = subprocess.Popen(
        [krt, "--state-dir", str(state), "up", "--runs", str(runs), "--gateway-addr", f"127.0.0.1:{port}",
         "--runtimed", "2", "--exit-with-parent"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("kruntimes ready"):
            break
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("krt up was not ready in time")
    else:
        pytest.fail("krt up exited before it was ready")
    yield str(state)
    proc.terminate()
    proc.wait(timeout=20)
