"""The main job: ``hermes demo`` builds a demo install, runs its mesh, updates it live, and
cleans up after itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil

from tests.support.cli import hermes


def demo(*args: str) -> subprocess.CompletedProcess:
    return hermes("demo", "--json", *args, timeout=600)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def demo_processes(install: str) -> list[psutil.Process]:
    """Processes running from the demo install's directory."""
    found = []
    for process in psutil.process_iter(["cwd", "status"]):
        if process.info["cwd"] == install and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def test_demo_updates_a_three_gateway_fleet_and_stops_it():
    result = demo()
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    before = report["before"]
    assert sorted(g["profile"] for g in before) == ["coder", "research", "writer"]
    assert {(g["state"], g["supervisor"], g["source"]) for g in before} == {("running", "gateway_host", "socket")}
    assert sorted(t["text"] for t in report["turns"]) == [
        "hello from coder",
        "hello from research",
        "hello from writer",
    ]
    update = report["update"]
    assert update["outcome"] == "success" and report["exit_code"] == 0
    fleet = {row["profile"]: row for row in update["fleet"]}
    for name in ("coder", "research", "writer"):
        assert (fleet[name]["verdict"], fleet[name]["running"]) == ("current", report["released"])
    assert update["receipt"].startswith(report["home"])
    reports = report["operator_reports"]  # each gateway's turn, through the hook reporter
    assert reports["activity:working"] >= 3 and reports["activity:idle"] >= 3, reports
    integration = report["integration"]  # the package built, signed, installed; the plugin in coder
    assert integration["install"]["provenance"] == {
        "source": "package",
        "package_id": "pohunek.runtime.hermes",
        "package_digest": integration["package"]["digest"],
    }
    assert integration["install"]["enabled"] and not integration["install"]["outdated"]
    assert [(c["tool"], c["ok"]) for c in integration["tool_calls"]] == [
        ("pohunek_session_get", True),
        ("pohunek_session_send", True),
        ("pohunek_session_screen", True),
    ]
    sign_in = report["sign_in"]
    assert (sign_in["state"], sign_in["email"], sign_in["tier"], sign_in["settled"]) == (
        "Completed",
        "operator@demo.invalid",
        "plus",
        "moved",
    )
    pids = [g["pid"] for g in before] + [row["pid"] for row in update["fleet"] if row["pid"]]
    assert not any(alive(pid) for pid in pids)  # nothing left running
    assert not demo_processes(report["install"])  # the auth worker and the portal simulator included
    assert not Path(report["home"]).exists()
    kept = Path(report["receipt"])  # copied out of the removed demo home, so the path shown opens
    try:
        assert json.loads(kept.read_text())["update_id"] == update["update_id"]
    finally:
        kept.unlink(missing_ok=True)


def test_demo_keep_leaves_the_mesh_up_until_mesh_down(short_dir):
    base = short_dir / "demo"
    result = demo("--keep", "--home", str(base))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    pids = [row["pid"] for row in report["update"]["fleet"] if row["pid"]]
    assert Path(report["receipt"]).exists()
    try:
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
    finally:
        down = hermes("mesh", "down", home=report["home"], timeout=120)
    assert down.returncode == 0, down.stderr
    assert "stopped the auth_worker" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert not demo_processes(report["install"])
