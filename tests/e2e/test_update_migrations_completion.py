"""Config migrations run by a real completion: every home migrated, the failed ones owed,
nothing done when all are current, and a completion without ruamel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.updater.completion import Completion
from services.updater.completion_contract import Request
from shared.config import load_config
from tests.support.processes import ROOT, python_env
from tests.support.updater import LEGACY, untouched, write_config

# --- the completion ---------------------------------------------------------------------------


def _completion(root: Path, tmp_path: Path) -> dict:
    # before == after: the dependency spec did not change, so nothing is pip-installed.
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    request = Request.new(
        update_id="test-migrations",
        root=str(root),
        install_root=str(ROOT),
        before=head,
        after=head,
        result_path=str(tmp_path / "result.json"),
    )
    return Completion(request).run()


def test_the_completion_migrates_every_home_and_owes_the_failed_ones(tmp_path):
    root = tmp_path / "hermes"
    write_config(root / "profiles" / "coder", LEGACY)
    write_config(root / "profiles" / "broken", "config_version: nope\n")
    write_config(root / "profiles" / "future", "config_version: 9\n")
    result = _completion(root, tmp_path)

    [step] = [s for s in result["steps"] if s["name"] == "migrations"]
    assert step["ok"] is False
    assert (step["detail"]["migrated"], step["detail"]["failed"]) == (1, 1)
    assert {Path(h["home"]).name: h["status"] for h in step["detail"]["homes"]} == {
        "coder": "migrated",
        "broken": "failed",
    }
    assert load_config(root / "profiles" / "coder")["update"] == {
        "branch": "stable",
        "archive_url": "https://example.com/{branch}.zip",
    }
    [owed] = [f for f in result["followups"] if f["step"] == "migrations"]
    assert owed["reason"].startswith(f"{root / 'profiles' / 'broken'}: ") and "config_version" in owed["reason"]
    [newer] = [s for s in result["skips"] if s["name"] == "migrations"]
    assert newer["reason"].startswith(f"{root / 'profiles' / 'future'}: ")
    # The migrations did not stop the rest of the completion.
    assert [s["name"] for s in result["steps"]][-2:] == ["restart", "verify"]


def test_the_completion_skips_migrations_when_every_home_is_current(tmp_path):
    root = tmp_path / "hermes"
    path = write_config(root, "config_version: 1\nmodel: x\n")
    before = untouched(path)
    result = _completion(root, tmp_path)
    assert [s["name"] for s in result["steps"]] == ["bytecode", "restart", "verify"]
    assert [s["reason"] for s in result["skips"] if s["name"] == "migrations"] == [
        "no home's config.yaml needed migrating"
    ]
    assert result["followups"] == []
    assert untouched(path) == before


def test_the_completion_without_ruamel_still_restarts_and_owes_the_migrations(tmp_path, monkeypatch):
    # An older release's venv lacks ruamel.yaml until sync_dependencies installs it; if that
    # failed, the completion must still import, restart and verify.
    for name in ("ruamel", "ruamel.yaml"):
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("shared.config", "services.updater.migrations"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported by an earlier test, or not
    root = tmp_path / "hermes"
    path = write_config(root, LEGACY)
    result = _completion(root, tmp_path)
    [step] = [s for s in result["steps"] if s["name"] == "migrations"]
    assert step["ok"] is False and "ruamel.yaml" in step["detail"]
    assert [f["step"] for f in result["followups"]] == ["migrations"]
    assert [s["name"] for s in result["steps"]][-2:] == ["restart", "verify"]
    assert path.read_text() == LEGACY


def test_the_entry_module_checks_a_request_without_ruamel(tmp_path):
    request = Request.new(
        update_id="check",
        root=str(tmp_path),
        install_root=str(ROOT),
        before=None,
        after=None,
        result_path=str(tmp_path / "result.json"),
    )
    request.write(tmp_path / "request.json")
    program = (
        "import runpy, sys; sys.modules['ruamel'] = sys.modules['ruamel.yaml'] = None; "
        f"sys.argv = ['completion', {str(tmp_path / 'request.json')!r}, '--check']; "
        "runpy.run_module('services.updater.completion', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=python_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
