"""The main job: ``hermes demo`` starts a real mesh, uses it, and cleans up after itself."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil

from shared.version import code_sha
from tests.conftest import ROOT, python_env


def demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "demo", "--json", *args],
        capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=180,
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_demo_runs_three_gateways_on_this_code_and_stops_them():
    result = demo()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    gateways = report["gateways"]
    assert sorted(g["profile"] for g in gateways) == ["coder", "research", "writer"]
    assert {(g["state"], g["supervisor"], g["source"]) for g in gateways} == {("running", "supervisord", "socket")}
    assert {g["code_sha"] for g in gateways} == {code_sha()}
    assert sorted(t["text"] for t in report["turns"]) == ["hello from coder", "hello from research", "hello from writer"]
    assert not any(alive(g["pid"]) for g in gateways)  # nothing left running
    assert report["kept"] is False


def test_demo_keep_leaves_the_mesh_up_until_mesh_down(short_dir):
    home = short_dir / "demo"
    result = demo("--keep", "--home", str(home))
    assert result.returncode == 0, result.stderr
    pids = [g["pid"] for g in json.loads(result.stdout)["gateways"]]
    try:
        assert all(alive(pid) for pid in pids)
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "hermes_cli.main", "mesh", "down"],
            capture_output=True, text=True, cwd=ROOT, env=python_env(HERMES_HOME=str(home)), timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert not any(alive(pid) for pid in pids)
