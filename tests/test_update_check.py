"""``hermes update --check`` and ``--plan`` against a real origin, and the confirmation prompt.

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

from tests.test_update import Install, git, install  # noqa: F401 (the fixture)


def check(install: Install, *args: str, **env: str) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "update", "--check", "--json", *args],
        cwd=install.path, env=install.env(**env), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


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
        cwd=install.path, env=install.env(), stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
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
