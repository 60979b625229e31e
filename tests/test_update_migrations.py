"""Versioned config.yaml migrations: 0 -> 1 nests the update keys, a home is all or nothing,
every home is on its own, and the completion reports what it did and what is owed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.updater import migrations
from services.updater.completion import Completion
from services.updater.completion_contract import Request
from services.updater.migrations import CONFIG_VERSION, migrate_all, migrate_home
from shared.config import config_path, load_config
from tests.support.processes import ROOT, python_env

LEGACY = """\
# Hermes config, edited by hand

model: hermes-4   # the default model
update_branch: stable  # pinned after the March incident
update_archive_url: "https://example.com/{branch}.zip"

# tools every profile gets
toolsets:
  - web
"""


def write(home: Path, text: str, mode: int = 0o644) -> Path:
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


def untouched(path: Path):
    """The file's bytes and mtime now, to compare with later."""
    return path.read_bytes(), os.stat(path).st_mtime_ns


def test_the_current_version_is_one():
    assert CONFIG_VERSION == 1 == len(migrations.MIGRATIONS)


def test_0_to_1_moves_the_flat_update_keys_and_keeps_every_comment(tmp_path):
    path = write(tmp_path, LEGACY, 0o600)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("migrated", 0, 1)
    assert outcome.applied == ["0->1 nest_update_keys"] and outcome.notes == [] and outcome.reason is None
    assert path.read_text() == (
        "# Hermes config, edited by hand\n"
        "\n"
        "config_version: 1\n"
        "model: hermes-4   # the default model\n"
        "update:\n"
        "  branch: stable  # pinned after the March incident\n"
        '  archive_url: "https://example.com/{branch}.zip"\n'
        "\n"
        "# tools every profile gets\n"
        "toolsets:\n"
        "  - web\n"
    )
    assert load_config(tmp_path) == {
        "config_version": 1,
        "model": "hermes-4",
        "update": {"branch": "stable", "archive_url": "https://example.com/{branch}.zip"},
        "toolsets": ["web"],
    }
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_flat_keys_join_an_existing_update_mapping(tmp_path):
    write(tmp_path, "update:\n  keep: 2  # snapshots\nmodel: x\nupdate_branch: dev\n# closing\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert config_path(tmp_path).read_text() == (
        "config_version: 1\nupdate:\n  keep: 2  # snapshots\n  branch: dev\nmodel: x\n# closing\n"
    )


def test_an_empty_update_key_becomes_the_mapping(tmp_path):
    write(tmp_path, "update:\n# models\nmodel: x\nupdate_archive_url: https://example.com/a.zip\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert load_config(tmp_path)["update"] == {"archive_url": "https://example.com/a.zip"}
    assert config_path(tmp_path).read_text().index("archive_url") < config_path(tmp_path).read_text().index("# models")


def test_a_nested_value_wins_and_the_conflicting_flat_one_is_kept_and_reported(tmp_path):
    write(
        tmp_path,
        "update:\n  branch: main   # the real one\n  # retries: 3\nupdate_branch: dev\nupdate_archive_url: u\n",
    )
    outcome = migrate_home(tmp_path)
    assert outcome.status == "migrated"
    assert len(outcome.notes) == 1
    assert "update_branch='dev'" in outcome.notes[0] and "update.legacy_conflicts.branch" in outcome.notes[0]
    assert load_config(tmp_path) == {
        "config_version": 1,
        "update": {"branch": "main", "legacy_conflicts": {"branch": "dev"}, "archive_url": "u"},
    }
    assert config_path(tmp_path).read_text() == (
        "config_version: 1\n"
        "update:\n"
        "  branch: main   # the real one\n"
        "  legacy_conflicts:\n"
        "    branch: dev  # was update_branch; update.branch was already set and wins\n"
        "  archive_url: u\n"
        "  # retries: 3\n"
    )


def test_a_flat_value_equal_to_the_nested_one_is_simply_dropped(tmp_path):
    write(tmp_path, "update:\n  branch: main\nupdate_branch: main\n")
    outcome = migrate_home(tmp_path)
    assert outcome.status == "migrated" and outcome.notes == []
    assert load_config(tmp_path) == {"config_version": 1, "update": {"branch": "main"}}


def test_a_file_without_legacy_keys_is_only_stamped(tmp_path):
    write(tmp_path, "# just a model\nmodel: x\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert config_path(tmp_path).read_text() == "# just a model\nconfig_version: 1\nmodel: x\n"


def test_no_config_file_is_absent_and_nothing_is_written(tmp_path):
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("absent", None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_current_file_is_not_rewritten(tmp_path):
    # Legacy-looking keys in a version-1 file are not migrated again: the version decides.
    path = write(tmp_path, "config_version: 1\nupdate_branch:   dev   # odd spacing stays\n")
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version, outcome.applied) == ("current", 1, 1, [])
    assert untouched(path) == before


def test_a_newer_file_is_left_alone(tmp_path):
    path = write(tmp_path, "config_version: 7\nupdate_branch: dev\n")
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("newer", 7, 7)
    assert "7" in outcome.reason and "newer" in outcome.reason
    assert untouched(path) == before


@pytest.mark.parametrize(
    "text, why",
    [
        ("model: [unclosed\n", "line 2"),
        ("- a\n- b\n", "not a mapping"),
        ("config_version: -1\n", "not a non-negative integer"),
        ("config_version: '1'\n", "not a non-negative integer"),
        ("config_version: true\n", "not a non-negative integer"),
        ("config_version: 1.0\n", "not a non-negative integer"),
        ("update: main\nupdate_branch: dev\n", "update holds a str, not a mapping"),
        ("update_branch: [dev]\n", "update_branch holds a list"),
    ],
    ids=["syntax", "list", "negative", "string", "bool", "float", "update-scalar", "flat-list"],
)
def test_a_malformed_file_fails_and_is_left_exactly_as_it_was(tmp_path, text, why):
    path = write(tmp_path, text)
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert outcome.status == "failed" and outcome.applied == []
    assert why in outcome.reason
    assert untouched(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temp file left


def test_a_migration_that_raises_fails_the_home_and_writes_nothing(tmp_path, monkeypatch):
    def half_done(data):
        data["update"] = {"branch": "half"}  # an edit in memory that must never reach the file
        raise KeyError("boom")

    monkeypatch.setattr(migrations, "MIGRATIONS", [half_done])
    path = write(tmp_path, LEGACY)
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("failed", 0, 0)
    assert "0->1 half_done" in outcome.reason and "KeyError" in outcome.reason
    assert untouched(path) == before


def test_every_home_is_migrated_on_its_own(tmp_path):
    root = tmp_path / "hermes"
    write(root, LEGACY)
    write(root / "profiles" / "broken", "update_branch: [unclosed\n")
    write(root / "profiles" / "coder", "update_branch: dev\n")
    write(root / "profiles" / "future", "config_version: 9\n")
    (root / "profiles" / "empty").mkdir()
    outcomes = {o.home: o for o in migrate_all(root)}
    profiles = root / "profiles"
    assert {home: o.status for home, o in outcomes.items()} == {
        root: "migrated",
        profiles / "broken": "failed",
        profiles / "coder": "migrated",
        profiles / "empty": "absent",
        profiles / "future": "newer",
    }
    assert load_config(profiles / "coder") == {"config_version": 1, "update": {"branch": "dev"}}
    assert load_config(root)["update"]["branch"] == "stable"
    assert config_path(profiles / "broken").read_text() == "update_branch: [unclosed\n"


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
    write(root / "profiles" / "coder", LEGACY)
    write(root / "profiles" / "broken", "config_version: nope\n")
    write(root / "profiles" / "future", "config_version: 9\n")
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
    path = write(root, "config_version: 1\nmodel: x\n")
    before = untouched(path)
    result = _completion(root, tmp_path)
    assert [s["name"] for s in result["steps"]] == ["restart", "verify"]
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
        monkeypatch.delitem(sys.modules, name)
    root = tmp_path / "hermes"
    path = write(root, LEGACY)
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
