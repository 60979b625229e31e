"""``hermes update`` end to end, what a committed update owes: armed, warned about, retried,
repaired by the next update."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support.installs import owed_warnings, start_update, updater_pid
from tests.support.processes import read_state, wait_for
from tests.support.releases import before_completion_runs, hold_completion, mark_completion

# --- what a committed update owes: armed, warned about, retried -------------------------------


def test_a_completion_that_died_is_run_again_by_the_next_update(install):
    from services.updater import obligations

    def crash_once(dev: Path) -> None:
        before_completion_runs(
            dev,
            (
                "    crashed = Path(request.root) / 'completion-crashed'\n"
                "    if not crashed.exists():\n"
                "        crashed.touch()\n"
                "        os._exit(9)\n"
            ),
        )

    gateway = install.gateway("default")
    old = install.head()
    new = install.release(
        "release whose completion dies once", edit=lambda dev: (crash_once(dev), mark_completion(dev))
    )
    first = install.hermes("update", "--yes", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    report = json.loads(first.stdout)
    assert report["outcome"] == "success"
    assert [f["step"] for f in report["followups"]] == ["completion", "fleet-restart"]  # what it leaves owed
    assert "⚠" not in first.stderr  # hermes update reports what it owes itself
    pending = obligations.read_completion(install.root)
    assert (pending["update_id"], pending["before"], pending["after"]) == (report["update_id"], old, new)
    assert obligations.read_fleet(install.root)["default"]["state"] == obligations.NOT_RESTARTED
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (default): run `hermes update`"]
    check = install.hermes("update", "--check", "--json")  # says what is owed instead of warning
    assert check.returncode == 0 and "⚠" not in check.stderr
    owed = json.loads(check.stdout)["owed"]
    assert owed["completion"]["update_id"] == report["update_id"] and set(owed["fleet_restart"]) == {"default"}

    second = install.hermes("update", "--yes", "--json")  # already up to date: the owed completion runs
    assert second.returncode == 0, second.stdout + second.stderr
    repaired = json.loads(second.stdout)
    assert repaired["retried"] == [{"owed": "completion", "update_id": report["update_id"], "how": "re-run"}]
    assert repaired["followups"] == []
    assert [(row["profile"], row["verdict"]) for row in repaired["fleet"]] == [("default", "current")]
    receipt = json.loads(Path(repaired["receipt"]).read_text())
    assert receipt["completion"]["marker"] == "new-tree" and receipt["completion"]["code_sha"] == new
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []
    with SyncClient(gateway.endpoint.control) as client:
        assert client.call(ops.STATUS)["code_sha"] == new


def test_sigint_before_the_commit_point_commits_nothing_and_owes_nothing(install):
    from services.updater import obligations
    from shared.files import locked

    old = install.head()
    install.release("release 2")
    receipts = install.root / "logs" / "update_receipts"
    receipts.mkdir(parents=True)
    with locked(receipts / "latest.json"):  # the updater waits on its first receipt write
        proc = start_update(install)
        os.kill(updater_pid(install), signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    report = json.loads(out)
    assert report["outcome"] == "interrupted" and report["exit_code"] == 130
    assert install.head() == old
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["apply"] is None and receipt["steps"][-1]["name"] == "interrupted"
    assert "before the commit point" in receipt["steps"][-1]["detail"]


def test_sigint_after_the_commit_point_keeps_what_is_owed_until_it_is_repaired(install):
    from services.updater import obligations

    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    assert install.hermes("mesh", "up", "--programs", "--profiles", "coder,writer", timeout=120).returncode == 0
    old = install.head()
    new = install.release("release 2", edit=hold_completion)
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    os.kill(updater_pid(install), signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    report = json.loads(out)
    assert report["outcome"] == "interrupted" and install.head() == new
    assert [f["step"] for f in report["followups"]] == ["completion", "fleet-restart"]
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert "after the commit point" in receipt["steps"][-1]["detail"]
    pending = obligations.read_completion(install.root)
    assert (pending["update_id"], pending["before"], pending["after"]) == (report["update_id"], old, new)
    owed = obligations.read_fleet(install.root)
    assert {p: (part["state"], part["expected"]) for p, part in owed.items()} == {
        "coder": (obligations.NOT_RESTARTED, new),
        "writer": (obligations.NOT_RESTARTED, new),
    }
    assert owed_warnings(install) == ["⚠ 2 gateways still run old code (coder, writer): run `hermes update`"]

    restarted = install.hermes("-p", "coder", "gateway", "restart", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert json.loads(restarted.stdout)["owed_restart"] == {"cleared": True, "expected": new, "running": new}
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (writer): run `hermes update`"]

    hold.unlink()
    second = install.hermes("update", "--yes", "--json")  # already up to date: the owed completion runs
    assert second.returncode == 0, second.stdout + second.stderr
    repaired = json.loads(second.stdout)
    assert repaired["retried"] == [{"owed": "completion", "update_id": report["update_id"], "how": "re-run"}]
    assert {(row["profile"], row["verdict"]) for row in repaired["fleet"]} == {
        ("coder", "current"),
        ("writer", "current"),
    }
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []


def test_a_stopped_completion_takes_its_whole_process_group_along(install):
    import psutil

    def hang_with_a_grandchild(dev: Path) -> None:
        """A completion that starts a long sleep (a pip, say), names it, and hangs."""
        before_completion_runs(
            dev,
            (
                "    import time\n"
                "    grandchild = subprocess.Popen(['sleep', '600'])\n"
                "    named = Path(request.root) / 'grandchild.pid'\n"
                "    named.with_suffix('.tmp').write_text(str(grandchild.pid))\n"
                "    named.with_suffix('.tmp').rename(named)\n"
                "    while True:\n"
                "        time.sleep(0.05)\n"
            ),
        )

    install.release("release whose completion hangs over a grandchild", edit=hang_with_a_grandchild)
    named = install.root / "grandchild.pid"
    proc = start_update(install)
    grandchild = None
    try:
        wait_for(named.exists, timeout=120, what="the completion to start its grandchild")
        grandchild = int(named.read_text())
        assert psutil.pid_exists(grandchild)
        os.kill(updater_pid(install), signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, out + err
        assert [f["step"] for f in json.loads(out)["followups"]] == ["completion"]

        def gone() -> bool:
            try:
                return psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        wait_for(gone, timeout=30, what="the completion's grandchild to be stopped with it")
    finally:
        if proc.poll() is None:
            proc.kill()
        if grandchild is not None:
            try:
                if psutil.Process(grandchild).name() == "sleep":
                    os.kill(grandchild, signal.SIGKILL)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass


def test_a_completion_that_outlives_its_killed_updater_is_taken_by_the_next_update(install):
    from services.updater import obligations
    from services.updater.lock import holder

    assert install.hermes("profile", "create", "coder").returncode == 0
    assert install.hermes("mesh", "up", "--programs", "--profiles", "coder", timeout=120).returncode == 0
    install.release("release 2", edit=hold_completion)
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    os.kill(updater_pid(install), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err  # the follower saw its updater die mid-run
    first = json.loads(out)
    assert first["outcome"] == "interrupted"
    hold.unlink()  # the orphaned completion restarts the fleet and writes its result
    wait_for(lambda: holder(install.root) is None, timeout=120, what="the orphaned completion to finish")
    coder = read_state(install.root / "profiles" / "coder")["pid"]

    second = install.hermes("update", "--yes")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"update {first['update_id']} had been interrupted" in second.stdout
    assert f"update {first['update_id']}" in second.stderr and "was interrupted" in second.stderr
    latest = json.loads(install.hermes("logs", "update", "--json").stdout)
    steps = {s["name"]: s["detail"] for s in latest["steps"]}
    assert steps["found-interrupted"]["updates"] == [first["update_id"]]
    assert steps["retry"]["how"] == "adopted"  # its result counts: no second restart of the fleet
    assert read_state(install.root / "profiles" / "coder")["pid"] == coder
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)["receipts"]
    assert [r["outcome"] for r in listed] == ["success", "interrupted"]
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []


def test_a_gateway_that_cannot_come_back_is_owed_until_it_runs_the_new_code(install):
    from services.updater import obligations

    def refuse_start(dev: Path) -> None:
        """The new gateway code exits at start (78, not restarted) in a home holding ``refuse-start``."""
        path = dev / "services" / "gateway" / "__main__.py"
        guard = (
            "import os\nfrom pathlib import Path\n"
            "if (Path(os.environ.get('HERMES_HOME', '.')) / 'refuse-start').exists():\n"
            "    raise SystemExit(78)\n"
        )
        path.write_text(guard + path.read_text())

    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    assert install.hermes("mesh", "up", "--programs", "--profiles", "coder,writer", timeout=120).returncode == 0
    new = install.release("release 2", edit=lambda dev: (hold_completion(dev), refuse_start(dev)))
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    writer = install.root / "profiles" / "writer"
    (writer / "refuse-start").touch()
    os.kill(read_state(writer)["pid"], signal.SIGKILL)  # its supervisor starts the new code, which exits
    hold.unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    report = json.loads(out)
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {("coder", "current"), ("writer", "down")}
    assert [(f["step"], f["reason"]) for f in report["followups"]] == [("fleet-restart", "gateway writer is down")]
    assert obligations.read_completion(install.root) is None  # the completion itself delivered
    owed = obligations.read_fleet(install.root)
    assert {p: (part["state"], part["expected"]) for p, part in owed.items()} == {"writer": (obligations.DOWN, new)}
    [line] = owed_warnings(install)
    assert line.startswith("⚠ 1 gateway is not on the new code (writer: down)")

    again = install.hermes("update", "--yes", "--json")  # nothing can start it yet: still owed, not forgotten
    assert again.returncode == 0, again.stdout + again.stderr
    assert [f["step"] for f in json.loads(again.stdout)["followups"]] == ["fleet-restart"]
    assert set(obligations.read_fleet(install.root)) == {"writer"}

    (writer / "refuse-start").unlink()
    restarted = install.hermes("-p", "writer", "gateway", "restart", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert json.loads(restarted.stdout)["owed_restart"] == {"cleared": True, "expected": new, "running": new}
    assert obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []
