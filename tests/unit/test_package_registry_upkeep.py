"""The package registry's upkeep: the catalog state it keeps after commits, residue, doctor."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runtime_package.registry import CATALOG_STATE, RECORD, Registry, RegistryUnreadable
from shared.errors import HermesError
from tests.support.registry_packages import PACKAGE_ID, digest, install, root_of


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry.at(tmp_path / "state", create=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- catalog state --------------------------------------------------------------------------------


def test_catalog_state_only_grows(registry):
    install(registry, 1, version="1", catalog_state=(5, frozenset({"k1"})))
    install(registry, 2, version="2", catalog_state=(3, frozenset({"k2"})))
    assert registry.catalog_state() == (5, frozenset({"k1", "k2"}))
    install(registry, 3, version="3", catalog_state=(9, frozenset()))
    assert registry.catalog_state() == (9, frozenset({"k1", "k2"}))
    assert mode(registry.root / CATALOG_STATE) == 0o600


@pytest.mark.parametrize(
    "failing",
    [
        {"n": 1, "version": "2"},  # conflict
        {"n": 2, "files": {"../x": (b"", False)}},  # bad path
    ],
)
def test_a_failed_install_leaves_the_catalog_state_unchanged(registry, failing):
    install(registry, catalog_state=(4, frozenset({"k1"})))
    raw = (registry.root / CATALOG_STATE).read_bytes()
    with pytest.raises(HermesError):
        install(registry, catalog_state=(99, frozenset({"k9"})), **failing)
    assert (registry.root / CATALOG_STATE).read_bytes() == raw


def test_an_unreadable_catalog_state_refuses_the_install_before_anything_changes(registry):
    (registry.root / CATALOG_STATE).write_bytes(b'{"schema":1}')
    os.chmod(registry.root / CATALOG_STATE, 0o600)
    with pytest.raises(RegistryUnreadable) as info:
        install(registry, catalog_state=(1, frozenset()))
    assert info.value.reason == "catalog_state_malformed"
    assert not (registry.root / RECORD).exists()
    assert (registry.root / CATALOG_STATE).read_bytes() == b'{"schema":1}'


# --- residue and doctor ---------------------------------------------------------------------------


def test_residue_is_reported_then_collected_by_the_next_mutation(registry):
    install(registry)
    (registry.packages / ".staging-abc-1").mkdir(mode=0o700)
    (registry.packages / ".staging-abc-1" / "f").write_bytes(b"half")
    (registry.packages / ".collect-def-2").write_bytes(b"")
    (registry.root / ".registry.json.0123abcd.tmp").write_bytes(b"torn")
    assert registry.doctor()["residue"] == [".collect-def-2", ".staging-abc-1"]
    registry.set_enabled(PACKAGE_ID, True)
    assert sorted(os.listdir(registry.packages)) == [digest(1).removeprefix("sha256:")]
    assert not (registry.root / ".registry.json.0123abcd.tmp").exists()


def test_doctor_reports_each_root_and_the_orphans(registry):
    install(registry, 1, version="1")
    install(registry, 2, version="2")
    (root_of(registry, 2) / "files" / "runtime.toml").write_bytes(b"x")
    orphan = registry.packages / ("f" * 64)
    orphan.mkdir(mode=0o700)
    report = registry.doctor()
    assert report["ok"] is False
    assert report["record"] == {"readable": True}
    assert report["roots"] == [
        {"digest": digest(1), "ok": True},
        {"digest": digest(2), "ok": False, "reason": "size_mismatch"},
    ]  # in the record's order: by id, then version
    assert report["orphans"] == ["f" * 64]


def test_doctor_of_an_unreadable_record(registry):
    (registry.root / RECORD).write_bytes(b"junk")
    os.chmod(registry.root / RECORD, 0o600)
    report = registry.doctor()
    assert report["ok"] is False
    assert report["record"] == {"readable": False, "reason": "malformed"}
    assert (registry.root / RECORD).read_bytes() == b"junk"
