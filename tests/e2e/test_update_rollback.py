"""``hermes update --rollback`` and ``hermes snapshot restore`` end to end: a real origin, a real
install, real gateways (supervisord's, and one unmanaged), and kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from services.updater import obligations
from tests.support.installs import Install, git, kill_updater_in_completion
from tests.support.processes import ROOT, python_env, wait_for


def updated(install: Install, *flags: str) -> dict:
    """A new release, and ``hermes update`` onto it; the update's report."""
    install.release(f"release {len(git(install.path, 'log', '--oneline').splitlines())}")
    result = install.hermes("update", "--yes", "--json", *flags)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_a_rollback_takes_the_fleet_and_the_root_home_back_to_where_the_update_started(install):
    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--profiles", "coder,writer", "--json", timeout=120)
    assert up.returncode == 0, up.stderr
    install.gateway("default")
    old = install.head()
    (install.root / "cron").mkdir()
    (install.root / "cron" / "jobs.json").write_text('[{"job": "before"}]\n')
    update = updated(install, "--backup")
    new = install.head()
    assert new != old and {r["running"] for r in update["fleet"]} == {new}
    (install.root / "cron" / "jobs.json").write_text('[{"job": "after"}]\n')

    plan = install.hermes("update", "--rollback", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert f"where update {update['update_id']} started" in plan.stdout and "restore the root home" in plan.stdout
    assert install.head() == new  # the plan changed nothing

    result = install.hermes("update", "--rollback", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success" and report["failure"] is None
    assert (report["rollback"]["of"], report["rollback"]["target"]) == (update["update_id"], old)
    assert install.head() == old
    assert {(r["profile"], r["running"], r["verdict"]) for r in report["fleet"]} == {
        ("default", old, "current"),
        ("coder", old, "current"),
        ("writer", old, "current"),
    }
    assert (install.root / "cron" / "jobs.json").read_text() == '[{"job": "before"}]\n'
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["completion"]["code_sha"] == old  # the completion of the code returned to
    assert receipt["plan"]["rollback"]["of"] == update["update_id"]
    names = [s["name"] for s in receipt["steps"]]
    assert names.index("rollback") < names.index("moved") < names.index("restore") < names.index("verify")
    assert receipt["before"]["code_sha"] == new and receipt["after"]["code_sha"] == old
    assert obligations.read_restore(install.root) is None and obligations.read_fleet(install.root) == {}
    # Each gateway, asked itself, reports the old commit.
    status = json.loads(install.hermes("gateway", "status", "--json").stdout)
    assert {g["profile"]: g["code_sha"] for g in status["gateways"]} == {"default": old, "coder": old, "writer": old}


def test_rollbacks_are_refused_with_a_typed_reason_and_change_nothing(install):
    def refused(*args: str, **env: str) -> str:
        result = install.hermes("update", "--rollback", *args, "--yes", "--json", **env)
        assert result.returncode == 2, result.stdout + result.stderr
        return json.loads(result.stdout)["error"]["code"]

    assert refused() == "rollback_unknown_update"  # nothing was ever updated
    update = updated(install, "--backup")
    head = install.head()
    assert refused("0123456789ab") == "rollback_unknown_update"
    assert refused(HERMES_INSTALL_KIND="docker") == "rollback_not_git"

    archive = Path(update["receipt"]).parent.parent.parent / "backups" / f"update_{update['update_id']}.tar.gz"
    good = archive.read_bytes()
    archive.write_bytes(good[:-10])
    assert refused() == "rollback_archive_invalid"
    archive.unlink()
    assert refused(update["update_id"]) == "rollback_archive_invalid"
    archive.write_bytes(good)

    receipt_path = Path(update["receipt"])
    receipt = json.loads(receipt_path.read_text())
    for step in receipt["steps"]:
        if step["name"] == "moved":
            step["detail"]["before"] = "f" * 40  # a commit this repository never had
    receipt_path.write_text(json.dumps(receipt))
    assert refused() == "rollback_commit_gone"
    assert install.head() == head
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)["receipts"]
    assert [r["update_id"] for r in listed] == [update["update_id"]]  # a refusal starts no updater


def test_snapshot_restore_is_refused_while_the_gateway_runs_and_restores_a_lost_file_once_it_is_stopped(install):
    assert install.hermes("profile", "create", "coder").returncode == 0
    coder = install.root / "profiles" / "coder"
    (coder / "auth.json").write_text('{"provider": "nous"}\n')
    assert install.hermes("mesh", "up", "--profiles", "coder", timeout=120).returncode == 0
    update = updated(install)
    listed = json.loads(install.hermes("snapshot", "list", "coder", "--json").stdout)["snapshots"]
    assert [(s["update_id"], s["complete"]) for s in listed] == [(update["update_id"], True)]
    (coder / "auth.json").unlink()

    code_and_error = install.hermes("snapshot", "restore", "coder", "--json")
    assert code_and_error.returncode == 2, code_and_error.stdout + code_and_error.stderr
    error = json.loads(code_and_error.stdout)["error"]
    assert error["code"] == "gateway_running" and "gateway of profile 'coder' runs" in error["message"]
    assert not (coder / "auth.json").exists()

    stopped = install.hermes("-p", "coder", "gateway", "stop", timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    result = install.hermes("snapshot", "restore", "coder", "--update", update["update_id"], "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    done = json.loads(result.stdout)
    assert "auth.json" in done["restored"] and done["update_id"] == update["update_id"]
    assert (coder / "auth.json").read_text() == '{"provider": "nous"}\n'
    text = install.hermes("snapshot", "restore", "coder")
    assert text.returncode == 0 and "unchanged  auth.json" in text.stdout


def test_an_updater_killed_mid_rollback_is_repaired_by_the_next_update(install):
    install.gateway("default")
    old = install.head()
    updated(install, "--backup")
    kill_updater_in_completion(install, "--rollback")
    again = install.hermes("update", "--rollback", "--yes", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["outcome"] == "success" and report["up_to_date"] and install.head() == old
    assert len(report["found_interrupted"]) == 1
    assert [(r["profile"], r["running"], r["verdict"]) for r in report["fleet"]] == [("default", old, "current")]
    assert obligations.read_completion(install.root) is None


CRASH_MID_RESTORE = """
import os, sys
from pathlib import Path
from services.updater import obligations, receipt_store
from services.updater.restore_owed import RestoreOwed
root, target, dies_at = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
[update] = receipt_store.ReceiptStore(root).all()[0]
owed = RestoreOwed(root, Path(sys.argv[4]), "r1", update, lambda *a: None)
owed.plan(target, update["backup"])
owed.arm()
real = os.replace
def replace(src, dst):
    if Path(dst).name == dies_at:  # killed (like kill -9) with the files before it renamed
        os._exit(9)
    real(src, dst)
os.replace = replace
owed.run()
"""


def test_a_restore_killed_midway_is_done_again_by_the_next_update(install):
    (install.root / "cron").mkdir()
    for name in ("a", "b", "c"):
        (install.root / "cron" / f"{name}.json").write_text(f"{name} before\n")
    old = install.head()
    updated(install, "--backup")
    for name in ("a", "b", "c"):
        (install.root / "cron" / f"{name}.json").write_text(f"{name} after\n")
    git(install.path, "reset", "-q", "--keep", old)  # the rollback's move happened; its restore is cut short
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_MID_RESTORE, str(install.root), old, "b.json", str(install.path)],
        env=python_env(),
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert crashed.returncode == 9, crashed.stderr
    texts = {(install.root / "cron" / f"{n}.json").read_text() for n in ("a", "b", "c")}
    assert len(texts) == 3 and any("before" in t for t in texts) and any("after" in t for t in texts)  # torn
    assert obligations.read_restore(install.root) is not None

    result = install.hermes("update", "--rollback", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert {"owed": "home-restore", "update_id": "r1", "how": "re-run"} in report["retried"]
    for name in ("a", "b", "c"):
        assert (install.root / "cron" / f"{name}.json").read_text() == f"{name} before\n"
    assert obligations.read_restore(install.root) is None


def test_an_update_returns_only_once_its_updater_let_go_of_the_lock_so_a_rollback_right_after_runs(install):
    """The updater says its last word, then drops the update lock on its way out: a command
    run the moment ``hermes update`` returns must not be refused by an update that has ended."""
    install.release("release 2")
    log = install.root / "logs" / "update.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_cli.main", "update", "--yes", "--json"],
        cwd=install.path,
        env=install.env(HERMES_FAULT_PAUSE_AT="updater:release"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: log.exists() and "paused updater:release" in log.read_text(), timeout=120, what="the pause")
        held_on = proc.poll() is None  # the updater holds the lock: the command must still wait for it
        updater = json.loads((install.root / "update.lock.json").read_text())["pid"]
        os.kill(updater, signal.SIGUSR1)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert held_on, "hermes update returned while its updater still held the update lock"
    assert proc.returncode == 0, out + err
    refused = install.hermes("update", "--rollback", "0123456789ab", "--yes", "--json")
    assert json.loads(refused.stdout)["error"]["code"] == "rollback_unknown_update"
