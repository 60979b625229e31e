"""The ``hermes`` command, run as a real process against a temporary home."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

from shared import homes
from tests.support.cli import hermes
from tests.support.processes import ROOT, Peer, python_env


def as_json(result: subprocess.CompletedProcess):
    return json.loads(result.stdout)


def start_gateway_peer(home) -> Peer:
    """A real service holding the profile's gateway endpoint lock, as a gateway would."""
    ep = homes.endpoint(home, "gateway")
    return Peer(["-m", "tests.support.peers.echo_service", ep.control, str(ep.lock_path)])


def test_version_names_the_code_commit(root):
    result = hermes("--version", home=root)
    assert result.returncode == 0
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    line = result.stdout.strip()
    assert re.fullmatch(
        r"Hermes Agent v0\.20\.0 \(2026\.8\.3\) · hermes-mesh [0-9]\S* · ([0-9a-f]{12}|no git checkout)", line
    ), line
    if head:
        assert line.endswith(f" · {head[:12]}")
    document = json.loads(hermes("--version", "--json", home=root).stdout)
    assert document["agent_release"] == "0.20.0" and document["agent_release_date"] == "2026.8.3"
    assert document["code_sha"] == (head or None)


def test_delete_refuses_while_a_service_of_the_profile_is_live(root):
    hermes("profile", "create", "coder", home=root)
    home = root / "profiles" / "coder"
    peer = start_gateway_peer(home)
    try:
        shown = as_json(hermes("profile", "show", "coder", "--json", home=root))
        assert [s["pid"] for s in shown["services"] if s["live"]] == [peer.pid]
        result = hermes("profile", "delete", "coder", "--yes", "--json", home=root)
        assert (result.returncode, as_json(result)["error"]["code"]) == (2, "profile_busy")
        assert as_json(result)["error"]["detail"]["pid"] == peer.pid
        assert home.is_dir() and peer.proc.poll() is None
    finally:
        os.kill(peer.pid, signal.SIGKILL)
        peer.kill()
    # kill -9 leaves the lock file behind, but the lock died with its holder
    assert hermes("profile", "delete", "coder", "--yes", home=root).returncode == 0
    assert not home.exists()


def test_doctor_reports_live_stale_and_fallback_endpoints(short_dir):
    deep_root = short_dir / ("d" * 60) / "hermes"
    assert hermes("profile", "create", "coder", home=deep_root).returncode == 0
    home = deep_root / "profiles" / "coder"
    peer = start_gateway_peer(home)
    try:
        checks = {c["name"]: c for c in as_json(hermes("doctor", "--json", home=deep_root))["checks"]}
        gateway = checks["profile coder: gateway"]
        assert gateway["detail"]["fallback"] is True
        assert gateway["detail"]["path_bytes"] <= homes.IPC_PATH_MAX
        assert "short private dir" in gateway["message"]
        assert (gateway["detail"]["live"], gateway["detail"]["pid"]) == (True, peer.pid)
    finally:
        os.kill(peer.pid, signal.SIGKILL)
        peer.kill()
    checks = {c["name"]: c for c in as_json(hermes("doctor", "--json", home=deep_root))["checks"]}
    assert checks["profile coder: gateway"]["detail"]["live"] is False
    assert checks["profile coder: gateway"]["detail"]["stale_lock"] is True
    hermes("profile", "delete", "coder", "--yes", home=deep_root)


def test_model_flag_is_exported_to_the_command(root):
    program = (
        "import os, sys; from hermes_cli import main as m\n"
        "m.apply_profile(None, 'nous-large'); print(os.environ['HERMES_MODEL'])"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env())
    assert result.stdout.strip() == "nous-large"
