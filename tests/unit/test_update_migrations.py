"""Versioned config.yaml migrations: 0 -> 1 nests the update keys, a home is all or nothing,
and every home is on its own."""

from __future__ import annotations

import os

import pytest

from services.updater import migrations
from services.updater.migrations import CONFIG_VERSION, migrate_all, migrate_home
from shared.config import config_path, load_config
from tests.support.updater import LEGACY, untouched, write_config


def test_the_current_version_is_one():
    assert CONFIG_VERSION == 1 == len(migrations.MIGRATIONS)


def test_0_to_1_moves_the_flat_update_keys_and_keeps_every_comment(tmp_path):
    path = write_config(tmp_path, LEGACY, 0o600)
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
    write_config(tmp_path, "update:\n  keep: 2  # snapshots\nmodel: x\nupdate_branch: dev\n# closing\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert config_path(tmp_path).read_text() == (
        "config_version: 1\nupdate:\n  keep: 2  # snapshots\n  branch: dev\nmodel: x\n# closing\n"
    )


def test_an_empty_update_key_becomes_the_mapping(tmp_path):
    write_config(tmp_path, "update:\n# models\nmodel: x\nupdate_archive_url: https://example.com/a.zip\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert load_config(tmp_path)["update"] == {"archive_url": "https://example.com/a.zip"}
    assert config_path(tmp_path).read_text().index("archive_url") < config_path(tmp_path).read_text().index("# models")


def test_a_nested_value_wins_and_the_conflicting_flat_one_is_kept_and_reported(tmp_path):
    write_config(
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
    write_config(tmp_path, "update:\n  branch: main\nupdate_branch: main\n")
    outcome = migrate_home(tmp_path)
    assert outcome.status == "migrated" and outcome.notes == []
    assert load_config(tmp_path) == {"config_version": 1, "update": {"branch": "main"}}


def test_a_file_without_legacy_keys_is_only_stamped(tmp_path):
    write_config(tmp_path, "# just a model\nmodel: x\n")
    assert migrate_home(tmp_path).status == "migrated"
    assert config_path(tmp_path).read_text() == "# just a model\nconfig_version: 1\nmodel: x\n"


def test_no_config_file_is_absent_and_nothing_is_written(tmp_path):
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("absent", None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_current_file_is_not_rewritten(tmp_path):
    # Legacy-looking keys in a version-1 file are not migrated again: the version decides.
    path = write_config(tmp_path, "config_version: 1\nupdate_branch:   dev   # odd spacing stays\n")
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version, outcome.applied) == ("current", 1, 1, [])
    assert untouched(path) == before


def test_a_newer_file_is_left_alone(tmp_path):
    path = write_config(tmp_path, "config_version: 7\nupdate_branch: dev\n")
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
    path = write_config(tmp_path, text)
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
    path = write_config(tmp_path, LEGACY)
    before = untouched(path)
    outcome = migrate_home(tmp_path)
    assert (outcome.status, outcome.from_version, outcome.to_version) == ("failed", 0, 0)
    assert "0->1 half_done" in outcome.reason and "KeyError" in outcome.reason
    assert untouched(path) == before


def test_every_home_is_migrated_on_its_own(tmp_path):
    root = tmp_path / "hermes"
    write_config(root, LEGACY)
    write_config(root / "profiles" / "broken", "update_branch: [unclosed\n")
    write_config(root / "profiles" / "coder", "update_branch: dev\n")
    write_config(root / "profiles" / "future", "config_version: 9\n")
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
