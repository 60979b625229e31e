"""A gateway's health in ``hermes gateway status``: a probe turn on its socket, against real
gateway processes, one of them running a release whose turns fail while it answers ``status``."""

from __future__ import annotations

import json
from pathlib import Path

from shared import homes
from tests.support.cli import hermes
from tests.support.releases import patch_release

AGENT_TURN = Path("services") / "gateway" / "app.py"
# The agent's work of every turn, caller's or probe: here a release breaks it at turn time.
WORK = "    await trio.sleep(seconds)\n"


def status(root: Path, *args: str) -> dict:
    """``hermes gateway status --json ARGS``'s document."""
    done = hermes("gateway", "status", "--json", *args, home=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def listed(root: Path, *args: str) -> dict[str, dict]:
    return {g["profile"]: g for g in status(root, *args)["gateways"]}


def test_a_serving_gateway_is_healthy_once_it_has_run_the_window(root, gateways):
    (root / "profiles" / "coder").mkdir(parents=True)
    gateways(root, "default"), gateways(root, "coder")

    settling = listed(root, "--min-healthy", "3600")
    healthy = listed(root, "--min-healthy", "0")

    for profile in ("default", "coder"):
        assert settling[profile]["health"]["state"] == "unknown"
        assert "healthy after 3600 s without a restart" in settling[profile]["health"]["why"]
        assert healthy[profile]["health"] == {"state": "healthy", "why": None}
        assert healthy[profile]["state"] == "running"


def test_a_gateway_whose_turns_fail_is_running_and_unhealthy(root, gateways, code):
    patch_release(code / AGENT_TURN, WORK, "    import services.gateway.missing_at_turn_time  # noqa: F401\n" + WORK)
    (root / "profiles" / "coder").mkdir(parents=True)
    broken = gateways(root, "coder", cwd=code)
    gateways(root, "default")

    seen = listed(root, "--min-healthy", "0")

    assert seen["coder"]["pid"] == broken.pid and seen["coder"]["state"] == "running"
    assert seen["coder"]["health"] == {"state": "unhealthy", "why": "its probe turn failed (internal_error)"}
    assert seen["default"]["health"]["state"] == "healthy"
    table = hermes("gateway", "status", "--min-healthy", "0", home=root)
    assert table.returncode == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith("coder "))
    assert row[3:5] == ["running", "unhealthy"]
    assert f"coder (pid {broken.pid}): unhealthy: its probe turn failed (internal_error)" in table.stdout


def test_a_gateway_whose_turn_takes_no_probe_is_of_unknown_health(root, gateways, code):
    patch_release(code / "shared" / "gateways" / "ops.py", '        "probe": Field(bool, required=False),\n', "")
    older = gateways(root, "default", cwd=code)

    seen = listed(root, "--min-healthy", "0")["default"]

    assert seen["pid"] == older.pid
    assert seen["health"] == {"state": "unknown", "why": "it runs code from before probe turns"}


def test_a_gateway_known_only_by_its_state_file_is_of_unknown_health(root, gateways):
    gateway = gateways(root, "default")
    socket = Path(homes.endpoint(gateway.home, "gateway", create=False).control[len("ipc://") :])
    socket.unlink()  # it serves on, but nobody can reach it: its state file and the scan still find it

    seen = listed(root, "--min-healthy", "0")["default"]

    assert (seen["pid"], seen["source"]) == (gateway.pid, "state_file")
    assert seen["health"] == {"state": "unknown", "why": "it did not answer on its socket"}


def test_the_window_is_config_yamls_unless_the_command_line_names_one(root, gateways):
    gateways(root, "default")
    (root / "config.yaml").write_text("update:\n  min_healthy: 0\n")

    document = status(root)
    assert document["min_healthy"] == 0 and "min_healthy_error" not in document
    assert document["gateways"][0]["health"] == {"state": "healthy", "why": None}

    assert listed(root, "--min-healthy", "3600")["default"]["health"]["state"] == "unknown"


def test_a_window_config_yaml_gets_wrong_is_named_and_status_answers_with_the_default(root, gateways):
    gateways(root, "default")
    (root / "config.yaml").write_text("update:\n  min_healthy: -5\n")

    document = status(root)
    assert document["min_healthy"] == 10
    assert "update.min_healthy" in document["min_healthy_error"]
    assert "the default 10 s was taken" in document["min_healthy_error"]
    table = hermes("gateway", "status", home=root)
    assert table.returncode == 0, table.stderr
    assert table.stdout.rstrip().splitlines()[-1].startswith("! ")
