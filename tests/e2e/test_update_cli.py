"""``hermes update`` against a real origin, up to the point where it would change the tree:
``--check``, ``--plan``, the confirmation prompt, every refusal, and the snapshot stage.

``--check`` answers whether there is newer code (exit 0 either way), exit 1 when it cannot
tell, exit 2 for an install that is not updated in place. ``--plan`` shows the plan the
updater itself would follow, settings from the root's ``config.yaml`` included.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.updater.install_kind import EXTERNAL_COMMANDS
from services.updater.snapshot import SNAPSHOTS_DIR
from tests.support.installs import Install, git


def check(install: Install, *args: str, **env: str) -> tuple[int, dict]:
    return install.hermes_json("update", "--check", *args, **env)


def test_check_says_whether_newer_code_exists_and_changes_nothing(install):
    code, answer = check(install)
    assert (code, answer["update_available"]) == (0, False), answer
    new = install.release("release 2")
    code, answer = check(install)
    assert (code, answer["update_available"]) == (0, True), answer
    assert answer["git"]["remote_sha"] == new
    assert install.head() != new
    assert not (install.root / "logs").exists()


def test_check_that_cannot_tell_says_so_instead_of_up_to_date(install):
    code, answer = check(install, "--branch", "no-such-branch")
    assert (code, answer["update_available"]) == (1, None), answer
    assert "no branch no-such-branch" in answer["reason"]

    git(install.path, "remote", "set-url", "origin", str(install.root / "gone.git"))
    code, answer = check(install)
    assert (code, answer["update_available"]) == (1, None), answer
    assert answer["reason"].startswith("cannot read the update target")


def test_check_of_an_install_not_updated_in_place_is_refused(install):
    code, answer = check(install, HERMES_INSTALL_KIND="docker")
    assert (code, answer["update_available"]) == (2, None), answer
    assert "docker compose pull" in answer["reason"]


def test_plan_follows_the_branch_and_backup_the_updater_would_use(install):
    git(install.dev, "checkout", "-qb", "stable")
    git(install.dev, "push", "-q", "origin", "stable")
    (install.root / "config.yaml").write_text("update:\n  branch: stable\n")
    done = install.hermes("update", "--plan", "--no-backup", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["git"]["branch"], plan["backup"]) == ("stable", "none")
    done = install.hermes("update", "--plan", "--branch", "main", "--json")  # the flag wins over the config
    assert json.loads(done.stdout)["git"]["branch"] == "main"


def _prompted(install: Install, keys: bytes) -> tuple[int, str]:
    """``hermes update`` on a terminal, answering the prompt with ``keys``."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_cli.main", "update"],
        cwd=install.path,
        env=install.env(),
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"[y/N]" not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 4096)
        os.write(leader, keys)
        code = proc.wait(timeout=60)
        while select.select([leader], [], [], 0.2)[0]:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return code, seen.decode(errors="replace")


def test_a_prompt_answered_no_or_with_ctrl_d_changes_nothing(install):
    new = install.release("release 2")
    for keys in (b"n\n", b"\x04"):
        code, shown = _prompted(install, keys)
        assert code == 2, shown
        assert "not confirmed" in shown and "Traceback" not in shown, shown
        assert install.head() != new
        assert not (install.root / "logs" / "update_receipts").exists()


def update(install: Install, *args: str, **env: str) -> tuple[int, dict]:
    return install.hermes_json("update", "--yes", *args, **env)


def steps(report: dict) -> list[dict]:
    return json.loads(Path(report["receipt"]).read_text())["steps"]


@pytest.mark.parametrize("kind", sorted(EXTERNAL_COMMANDS))
def test_every_install_kind_not_updated_in_place_is_refused_with_its_command(install, kind):
    new = install.release("release 2")
    code, report = update(install, HERMES_INSTALL_KIND=kind)
    assert (code, report.get("outcome")) == (2, "refused"), report
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert EXTERNAL_COMMANDS[kind] in receipt["skips"][0]["reason"]
    assert install.head() != new


def test_a_history_that_does_not_fast_forward_fails_and_changes_nothing(install):
    old = install.head()
    git(install.dev, "reset", "-q", "--hard", "HEAD~1")
    (install.dev / "RELEASE").write_text("a rewritten history")
    git(install.dev, "add", "-A")
    git(install.dev, "commit", "-qm", "a rewritten history")
    git(install.dev, "push", "-q", "--force", "origin", "HEAD")
    code, report = update(install)
    assert (code, report["outcome"]) == (1, "failed"), report
    assert install.head() == old
    apply = next(s for s in steps(report) if s["name"] == "apply")
    assert apply["ok"] is False and apply["detail"]["code"] == "not_fast_forward", apply


def test_a_profile_that_cannot_be_snapshotted_stops_the_update_before_apply(install):
    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    (install.root / "profiles" / "writer" / SNAPSHOTS_DIR).write_text("a file where the directory goes")
    new = install.release("release 2")
    code, report = update(install)
    assert (code, report["outcome"]) == (1, "failed"), report
    assert install.head() != new
    assert not list((install.root / SNAPSHOTS_DIR).iterdir())  # all or nothing: the root's is gone too
    assert not list((install.root / "profiles" / "coder" / SNAPSHOTS_DIR).iterdir())
    assert "writer" in next(s for s in steps(report) if s["name"] == "snapshot")["detail"]


def test_backup_archives_the_root_and_no_backup_says_it_took_none(install):
    install.release("release 2")
    code, report = update(install, "--backup")
    assert (code, report["outcome"]) == (0, "success"), report
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert Path(receipt["backup"]["path"]).is_file() and receipt["snapshots"]
    install.release("release 3")
    code, report = update(install, "--no-backup")
    assert (code, report["outcome"]) == (0, "success"), report
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert "--no-backup" in next(s["reason"] for s in receipt["skips"] if s["name"] == "snapshot")
