"""`make lab` starts JupyterLab as root (containers, cloud workshop machines) and as a normal user."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.lab


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(tmp_path: Path, as_user: str | None) -> None:
    port, token = free_port(), "t0ken"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "MEMORYKIT_HOME": str(tmp_path / "mk"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "NUMBA_CACHE_DIR": str(home / "numba")}
    env.pop("REDIS_URL", None)
    extra = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
    cmd = ["make", "-s", "-o", ".venv/.setup-done", "lab", f"LAB_EXTRA={extra}"]
    if as_user:
        shutil.chown(tmp_path, as_user)
        for p in tmp_path.rglob("*"):
            shutil.chown(p, as_user)
        cmd = ["runuser", "-u", as_user, "--", "env", *[f"{k}={v}" for k, v in env.items()], *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"make lab exited:\n{proc.stdout.read()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(0.5)
        pytest.fail("JupyterLab did not answer within 90 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
        proc.wait(timeout=20)
        subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "memorykit.server", "stop"],
                       env=env, cwd=ROOT, capture_output=True)


def test_make_lab_as_this_user(tmp_path):
    start_lab(tmp_path, None)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to switch user")
def test_make_lab_as_a_normal_user_has_no_allow_root():
    """As a normal user the command carries no --allow-root (JupyterLab needs none then).

    A dry run: this machine's interpreter lives under /root, which another user cannot execute,
    so actually starting JupyterLab as `nobody` would test the machine, not the Makefile.
    """
    readable = subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", str(ROOT / "Makefile")])
    if readable.returncode != 0:
        pytest.skip("this checkout is not readable by another user (e.g. it lives under /root)")
    out = subprocess.run(["runuser", "-u", "nobody", "--", "make", "-n", "-o", ".venv/.setup-done", "lab"],
                         cwd=ROOT, capture_output=True, text=True)
    line = next(ln for ln in out.stdout.splitlines() if "jupyter lab" in ln)
    assert "--allow-root" not in line
    root = subprocess.run(["make", "-n", "-o", ".venv/.setup-done", "lab"], cwd=ROOT, capture_output=True, text=True)
    assert "--allow-root" in next(ln for ln in root.stdout.splitlines() if "jupyter lab" in ln)
