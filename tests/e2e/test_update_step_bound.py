"""No completion step hangs an update: a step past ``update.step_timeout`` is stopped, owed as a
follow-up naming it, and the update finishes; its progress is shown while it runs. Against a
real origin, a real install, real gateways and the real completion of a release that hangs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from shared.identity import read_cmdline
from tests.support.cli import HERMES
from tests.support.installs import kill_updater_in_completion, owed_warnings
from tests.support.releases import patch_release

MIGRATIONS = Path("services") / "updater" / "migrations.py"
ANCHOR = '    """Every home of the install, the root first; one home\'s failure is its own outcome only."""\n'


def hang_migrations(dev: Path, *, deaf: bool = False) -> None:
    """A release whose migrations step never ends; ``deaf``: not even for the completion's own
    stop, a signal it ignores."""
    deafen = "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n" if deaf else ""
    hang = f"    import signal, time\n{deafen}    while True:\n        time.sleep(0.1)\n"
    patch_release(dev / MIGRATIONS, ANCHOR, ANCHOR + hang)


def receipt_of(report: dict) -> dict:
    return json.loads(Path(report["receipt"]).read_text())


def steps(receipt: dict) -> dict[str, dict]:
    return {step["name"]: step for step in receipt["steps"]}


def test_a_hung_step_is_stopped_owed_and_the_steps_after_it_still_run(install):
    (install.root / "config.yaml").write_text("update:\n  step_timeout: 2\n  canary: false\n")
    install.gateway("default")
    new = install.release("release 2: migrations hang", edit=hang_migrations)
    follower = subprocess.Popen(
        [*HERMES, "logs", "update", "--follow"],
        cwd=install.path,
        env=install.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stderr is not None
        assert follower.stderr.readline().startswith("waiting up to 30s for an update to start")
        done = install.hermes("update", "--yes", timeout=240)
        _, followed = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()

    assert done.returncode == 0, done.stdout + done.stderr  # committed: nothing fails it now
    code, receipt = install.hermes_json("logs", "update")
    assert code == 0, receipt
    assert receipt["outcome"] == "success" and install.head() == new
    by_name = steps(receipt)
    assert by_name["migrations"]["ok"] is False
    assert "passed its bound of 2 s (update.step_timeout) and was stopped" in by_name["migrations"]["detail"]
    assert {"restart", "verify"} <= by_name.keys()
    assert [row["verdict"] for row in receipt["fleet"]] == ["current"]
    owed = {f["step"]: f["reason"] for f in receipt["followups"]}
    assert "bound of 2 s" in owed["migrations"] and "completion" not in owed
    # Both followers saw the step while it ran, with its age against its bound: the update's
    # own, and `hermes logs update --follow` in another terminal.
    assert "completion  migrations 0 s of 2 s" in done.stderr, done.stderr
    assert "completion  migrations 0 s of 2 s" in followed, followed
    assert receipt["completion"]["code_sha"] == new


def test_a_step_deaf_to_its_stop_is_ended_by_the_updater_and_the_completion_is_owed(install):
    (install.root / "config.yaml").write_text("update:\n  step_timeout: 1\n  canary: false\n")
    install.gateway("default")
    new = install.release("release 2: migrations hang, deaf", edit=lambda dev: hang_migrations(dev, deaf=True))

    code, report = install.hermes_json("update", "--yes", timeout=240)

    assert code == 0, report
    receipt = receipt_of(report)
    assert receipt["outcome"] == "success" and install.head() == new
    owed = {f["step"]: f["reason"] for f in receipt["followups"]}
    assert "killed" in owed["migrations"] and "update.step_timeout" in owed["migrations"]
    assert "migrations step" in owed["completion"]
    progress = receipt["completion"]["progress"]  # the last the updater heard of it
    assert (progress["step"], progress["bound"]) == ("migrations", 1)
    assert "services.updater.completion" not in " ".join(read_cmdline(receipt["completion"]["pid"]) or [])
    # Owed, so the next command says so.
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (default): run `hermes update`"]


def test_an_orphaned_completion_deaf_to_its_stop_ends_itself_and_frees_the_lock(install):
    (install.root / "config.yaml").write_text("update:\n  step_timeout: 1\n  canary: false\n")
    install.gateway("default")
    install.release("release 2: migrations hang, deaf", edit=lambda dev: hang_migrations(dev, deaf=True))

    # The updater is killed while its completion hangs: no one is left to enforce the bound but
    # the completion's own heartbeat. This returns once the lock is free.
    kill_updater_in_completion(install)

    (progress_file,) = (install.root / "logs" / "update_receipts").glob("*.progress.json")
    progress = json.loads(progress_file.read_text())
    assert (progress["step"], progress["bound"]) == ("migrations", 1)
    assert "services.updater.completion" not in " ".join(read_cmdline(progress["pid"]) or [])
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (default): run `hermes update`"]
