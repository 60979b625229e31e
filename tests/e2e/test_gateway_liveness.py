"""``hermes doctor`` and ``hermes profile list|show`` know a gateway this host has no lock or
state file for, as a containerized one is: its home elsewhere, its control socket on CURVE TCP.
Asked as ``hermes gateway status`` asks it, it is running while it answers and ``offline`` once
its process is gone."""

from __future__ import annotations

from shared.mesh_tcp import TCP_ENV
from tests.support.cli import hermes, hermes_json
from tests.support.processes import python_env
from tests.support.tcp import free_port_pair


def _doctor_gateway(root, env) -> dict:
    code, done = hermes_json("doctor", "--json", home=root, env_extra=env)
    assert code == 0, done
    return {check["name"]: check for check in done["checks"]}["profile coder: gateway"]


def _listed_gateway(root, env, *command: str) -> dict:
    code, done = hermes_json("profile", *command, "--json", home=root, env_extra=env)
    assert code == 0, done
    profiles = done["profiles"] if command == ("list",) else [done]
    [coder] = [p for p in profiles if p["name"] == "coder"]
    [gateway] = [s for s in coder["services"] if s["service"] == "gateway"]
    return gateway


def test_doctor_and_profile_list_show_a_gateway_out_of_sight_running_then_offline(root, short_dir, gateways):
    (root / "profiles" / "coder").mkdir(parents=True)
    elsewhere = short_dir / "elsewhere"  # coder's gateway runs on a home of its own, with its own keys
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    assert hermes("mesh", "keys", "init", "--profile", "coder", home=elsewhere).returncode == 0
    theirs = hermes_json("mesh", "keys", "show", home=elsewhere)[1]["services"]["gateway@coder"]
    ours = hermes("mesh", "keys", "show", "--client", home=root).stdout.strip()
    assert hermes("mesh", "keys", "authorize", "--server", "gateway@coder", theirs, home=root).returncode == 0
    assert hermes("mesh", "keys", "authorize", "operator", ours, home=elsewhere).returncode == 0
    env = {TCP_ENV: f"gateway@coder=tcp://127.0.0.1:{free_port_pair()}"}
    gateway = gateways(elsewhere, "coder", env=python_env(**env))
    assert not (root / "profiles" / "coder" / "run" / "gateway.lock").exists()  # nothing of it here

    doctor = _doctor_gateway(root, env)
    assert (doctor["status"], doctor["detail"]["live"], doctor["detail"]["state"]) == ("ok", True, "running")
    assert doctor["detail"]["pid"] == gateway.pid and "running (pid" in doctor["message"]
    for command in (("list",), ("show", "coder")):
        listed = _listed_gateway(root, env, *command)
        assert (listed["live"], listed["pid"], listed["state"], listed["source"]) == (
            True,
            gateway.pid,
            "running",
            "socket",
        )
    text = hermes("profile", "list", home=root, env_extra=env)
    assert f"gateway (pid {gateway.pid})" in text.stdout, text.stdout + text.stderr

    gateway.kill()
    doctor = _doctor_gateway(root, env)
    assert (doctor["detail"]["live"], doctor["detail"]["state"]) == (False, "offline")
    assert "offline" in doctor["message"] and "not running" not in doctor["message"]
    listed = _listed_gateway(root, env, "list")
    assert (listed["live"], listed["pid"], listed["state"]) == (False, None, "offline")
    text = hermes("profile", "list", home=root, env_extra=env)
    assert "gateway offline" in text.stdout, text.stdout + text.stderr


def test_a_gateway_that_refuses_this_client_is_refused_not_stopped(root, short_dir, gateways):
    (root / "profiles" / "coder").mkdir(parents=True)
    elsewhere = short_dir / "elsewhere"  # its gateway never authorized this install's client key
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    assert hermes("mesh", "keys", "init", "--profile", "coder", home=elsewhere).returncode == 0
    theirs = hermes_json("mesh", "keys", "show", home=elsewhere)[1]["services"]["gateway@coder"]
    assert hermes("mesh", "keys", "authorize", "--server", "gateway@coder", theirs, home=root).returncode == 0
    env = {TCP_ENV: f"gateway@coder=tcp://127.0.0.1:{free_port_pair()}"}
    gateways(elsewhere, "coder", env=python_env(**env))

    doctor = _doctor_gateway(root, env)
    assert (doctor["status"], doctor["detail"]["live"], doctor["detail"]["state"]) == ("warn", False, "refused")
    assert doctor["detail"]["error"]["code"] == "auth_failed"
    listed = _listed_gateway(root, env, "list")
    assert (listed["live"], listed["state"], listed["error"]["code"]) == (False, "refused", "auth_failed")
