"""The ``hermes`` command, run as a real process against a temporary home."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

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


def test_no_command_and_unknown_command_are_usage_errors(root):
    assert hermes(home=root).returncode == 2
    assert hermes("frobnicate", home=root).returncode == 2


@pytest.mark.parametrize(
    "argv",
    [
        ("frobnicate", "--json"),
        ("profile", "list", "--frobnicate", "--json"),
        ("operator", "install", "--access-mode", "everything", "--json"),
        ("logs", "update", "--follow", "--wait", "soon", "--json"),
        ("profile", "create", "--json"),
    ],
)
def test_a_usage_error_under_json_is_one_json_error_document(root, argv):
    result = hermes(*argv, home=root)
    assert result.returncode == 2
    error = as_json(result)["error"]  # the whole of stdout is one document
    assert error["code"] == "usage_error" and error["message"].startswith("hermes"), error
    assert result.stderr == ""
    text = hermes(*[word for word in argv if word != "--json"], home=root)
    assert text.returncode == 2 and text.stdout == "" and "error:" in text.stderr


def test_profile_create_list_show_delete(root):
    created = hermes("profile", "create", "coder", "--json", home=root)
    assert created.returncode == 0, created.stderr
    home = root / "profiles" / "coder"
    assert as_json(created) == {"name": "coder", "home": str(home)}
    assert oct((home / "run").stat().st_mode & 0o777) == "0o700"

    listed = as_json(hermes("profile", "list", "--json", home=root))
    assert [p["name"] for p in listed["profiles"]] == ["default", "coder"]
    assert listed["active"] == "default"

    shown = as_json(hermes("profile", "show", "coder", "--json", home=root))
    assert shown["home"] == str(home) and shown["gateway_state"] == {"status": "absent"}

    deleted = hermes("profile", "delete", "coder", "--yes", home=root)
    assert deleted.returncode == 0, deleted.stderr
    assert not home.exists()
    assert [p["name"] for p in as_json(hermes("profile", "list", "--json", home=root))["profiles"]] == ["default"]


def test_profile_create_on_a_new_machine_makes_the_root_home_and_all_it_makes_0700(short_dir):
    root = short_dir / "new" / "home"  # a new machine: no root home yet, nor its parent
    old = os.umask(0o022)  # the child inherits it
    try:
        created = hermes("profile", "create", "coder", home=root)
    finally:
        os.umask(old)
    assert created.returncode == 0, created.stderr
    top = short_dir / "new"
    modes = {str(p.relative_to(short_dir)): oct(p.stat().st_mode & 0o777) for p in (top, *top.rglob("*")) if p.is_dir()}
    assert {"new/home", "new/home/profiles", "new/home/profiles/coder/run", "new/home/profiles/coder/logs"} <= set(
        modes
    )
    assert modes == dict.fromkeys(modes, "0o700")


@pytest.mark.parametrize("name", ["Coder", "-x", "a/b", "", "x" * 65, "default"])
def test_profile_create_refuses_bad_or_reserved_names(root, name):
    result = hermes("profile", "create", "--json", "--", name, home=root)
    assert result.returncode == 2
    assert as_json(result)["error"]["code"] in {"invalid_profile_name", "profile_reserved"}


def test_profile_create_twice_is_refused(root):
    assert hermes("profile", "create", "coder", home=root).returncode == 0
    again = hermes("profile", "create", "coder", "--json", home=root)
    assert (again.returncode, as_json(again)["error"]["code"]) == (2, "profile_exists")


def test_profile_operations_are_anchored_on_the_root(root):
    for name in ("coder", "writer"):
        assert hermes("profile", "create", name, home=root).returncode == 0
    # Launched for a profile (HERMES_HOME is the profile's home), or with -p before or after.
    for args, home in (
        (("profile", "list", "--json"), root / "profiles" / "coder"),
        (("-p", "coder", "profile", "list", "--json"), root),
        (("profile", "list", "--json", "--profile", "coder"), root),
        (("--profile=coder", "profile", "list", "--json"), root),
    ):
        listed = as_json(hermes(*args, home=home))
        assert listed["root"] == str(root)
        assert listed["active"] == "coder"
        assert [p["name"] for p in listed["profiles"]] == ["default", "coder", "writer"]


def test_unknown_profile_flag_is_refused_before_anything_runs(root):
    result = hermes("-p", "ghost", "doctor", "--json", home=root)
    assert result.returncode == 2
    assert as_json(result)["error"]["code"] == "profile_not_found"
    assert not (root / "profiles" / "ghost").exists()


def test_delete_needs_confirmation_when_not_interactive(root):
    hermes("profile", "create", "coder", home=root)
    result = hermes("profile", "delete", "coder", "--json", home=root)
    assert (result.returncode, as_json(result)["error"]["code"]) == (2, "confirmation_required")
    assert (root / "profiles" / "coder").is_dir()


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


def test_doctor_on_a_fresh_home_passes(root):
    result = hermes("doctor", "--json", home=root)
    assert result.returncode == 0, result.stdout
    report = as_json(result)
    assert report["ok"] is True
    names = {c["name"] for c in report["checks"]}
    assert {"python", "dependency zmq", "install", "root home", "profile default: gateway"} <= names


def test_doctor_fails_on_an_unsafe_run_dir(root):
    hermes("profile", "create", "coder", home=root)
    (root / "profiles" / "coder" / "run").chmod(0o755)
    result = hermes("doctor", "--json", home=root)
    assert result.returncode == 1
    failed = [c for c in as_json(result)["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["profile coder: run dir"]
    assert "0755" in failed[0]["message"]


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
