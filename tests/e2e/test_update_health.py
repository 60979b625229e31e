"""The update's verify asks every gateway for a probe turn: its receipt and its output say
each gateway's health beside its commit, against a real origin, a real install and real
gateways."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.releases import patch_release

AGENT_TURN = Path("services") / "gateway" / "app.py"
WORK = "    await trio.sleep(seconds)\n"  # the agent's work of every turn, caller's or probe


def break_turns(dev: Path) -> None:
    """A release whose gateway starts and answers status, and fails every turn."""
    patch_release(dev / AGENT_TURN, WORK, "    import services.gateway.missing_at_turn_time  # noqa: F401\n" + WORK)


def fleet(report: dict) -> dict[str, dict]:
    return {row["profile"]: row for row in report["fleet"]}


def test_a_release_whose_turns_fail_is_current_and_unhealthy_in_the_receipt(install):
    (install.root / "config.yaml").write_text("update:\n  min_healthy: 0\n  canary: false\n")
    install.gateway("default")
    new = install.release("release 2: turns fail", edit=break_turns)

    done = install.hermes("update", "--yes", "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    row = fleet(json.loads(done.stdout))["default"]
    assert (row["verdict"], row["running"]) == ("current", new)
    assert row["health"] == {"state": "unhealthy", "why": "its probe turn failed (internal_error)"}
    receipt = json.loads(Path(json.loads(done.stdout)["receipt"]).read_text())
    assert fleet(receipt)["default"]["health"] == row["health"]
    text = install.hermes("logs", "update")  # the receipt, as text: its steps, then its fleet
    assert text.returncode == 0, text.stderr
    fleet_row = next(line.split() for line in text.stdout.splitlines() if line.startswith("default "))
    assert fleet_row[-2:] == ["current", "unhealthy"]
    assert f"default (pid {row['pid']}): unhealthy: its probe turn failed (internal_error)" in text.stdout


def test_the_window_of_config_yaml_judges_a_sound_release(install):
    install.gateway("default")
    install.release("release 2")
    (install.root / "config.yaml").write_text("update:\n  min_healthy: 3600\n  canary: false\n")

    done = install.hermes("update", "--yes", "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    health = fleet(json.loads(done.stdout))["default"]["health"]
    assert health["state"] == "unknown" and "healthy after 3600 s without a restart" in health["why"]

    install.release("release 3")
    (install.root / "config.yaml").write_text("update:\n  min_healthy: 0\n  canary: false\n")
    done = install.hermes("update", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet(json.loads(done.stdout))["default"]["health"] == {"state": "healthy", "why": None}


def test_a_window_config_yaml_gets_wrong_refuses_the_update_before_anything_moves(install):
    before = install.head()
    install.release("release 2")
    (install.root / "config.yaml").write_text("update:\n  min_healthy: soon\n")

    code, report = install.hermes_json("update", "--yes")

    assert code == 1
    assert report["outcome"] == "failed" and install.head() == before
    assert "update.min_healthy" in json.dumps(report["failure"])
