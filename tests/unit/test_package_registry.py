"""The package registry's transactions: the store's safety, the record, selectors, catalog state."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_package.registry import (
    LOCK,
    RECORD,
    PackageConflict,
    PackageDisabled,
    PackageNotInstalled,
    PackageRequestInvalid,
    Record,
    Registry,
    RegistryBusy,
    RegistryUnreadable,
    RootInvalid,
    SelectorAmbiguous,
    StoreUnsafe,
)
from shared.errors import HermesError
from tests.support.registry_packages import FILES, PACKAGE_ID, digest, install, root_of, tree_bytes


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry.at(tmp_path / "state", create=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- the store -----------------------------------------------------------------------------------


def test_create_makes_state_and_store_owner_private(tmp_path):
    os.umask(0o022)
    registry = Registry.at(tmp_path / "a" / "state", create=True)
    assert registry.root == tmp_path / "a" / "state" / "plugins"
    assert mode(registry.root) == 0o700
    assert mode(tmp_path / "a" / "state") == 0o700
    assert Registry.at(tmp_path / "a" / "state", create=False).root == registry.root


def test_missing_store_without_create_is_unsafe(tmp_path):
    with pytest.raises(StoreUnsafe) as info:
        Registry.at(tmp_path / "state", create=False)
    assert info.value.detail == {"reason": "missing"}
    assert not (tmp_path / "state").exists()


def test_store_of_mode_0755_is_unsafe_and_never_written(registry):
    os.chmod(registry.root, 0o755)
    with pytest.raises(StoreUnsafe) as info:
        Registry.at(registry.root.parent, create=True)
    assert info.value.code == "plugin_store_unavailable"
    with pytest.raises(StoreUnsafe):
        install(registry)
    assert os.listdir(registry.root) == []


def test_store_that_is_a_symlink_is_unsafe(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "plugins").symlink_to(real)
    with pytest.raises(StoreUnsafe) as info:
        Registry.at(tmp_path / "state", create=True)
    assert info.value.reason == "symlink"


def test_missing_record_is_the_empty_registry(registry):
    assert registry.read() == Record(0, (), {})
    assert registry.catalog_state() == (None, frozenset())


# --- an unreadable record is never overwritten ------------------------------------------------------

CORRUPT = {
    "not json": (b"{not json", "malformed"),
    "duplicate key": (b'{"schema":1,"schema":1,"generation":0,"packages":[],"selected":{}}', "malformed"),
    "float": (b'{"schema":1,"generation":1.5,"packages":[],"selected":{}}', "malformed"),
    "unknown field": (b'{"schema":1,"generation":0,"packages":[],"selected":{},"extra":0}', "malformed"),
    "unknown schema": (b'{"schema":2,"generation":0,"packages":[],"selected":{}}', "unknown_schema"),
    "selection of nothing": (
        b'{"schema":1,"generation":0,"packages":[],"selected":{"a":"sha256:' + b"0" * 64 + b'"}}',
        "inconsistent",
    ),
    "oversized": (b" " * (1 << 20) + b"{}", "oversized"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_record_is_unreadable_and_left_byte_for_byte(registry, case):
    raw, reason = CORRUPT[case]
    record = registry.root / RECORD
    record.write_bytes(raw)
    os.chmod(record, 0o600)
    with pytest.raises(RegistryUnreadable) as info:
        registry.read()
    assert info.value.code == "package_registry_unreadable"
    assert info.value.detail == {"reason": reason}
    with pytest.raises(RegistryUnreadable):
        install(registry)
    with pytest.raises(RegistryUnreadable):
        registry.uninstall(PACKAGE_ID)
    assert record.read_bytes() == raw
    assert not root_of(registry).exists()


def test_record_of_mode_0644_is_unreadable_and_kept(registry):
    install(registry)
    record = registry.root / RECORD
    before = record.read_bytes()
    os.chmod(record, 0o644)
    with pytest.raises(RegistryUnreadable) as info:
        registry.read()
    assert info.value.reason == "unsafe_mode"
    with pytest.raises(RegistryUnreadable):
        registry.set_enabled(PACKAGE_ID, False)
    assert record.read_bytes() == before
    assert mode(record) == 0o644


def test_record_that_is_a_symlink_is_unreadable(registry, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_bytes(b'{"schema":1,"generation":0,"packages":[],"selected":{}}')
    (registry.root / RECORD).symlink_to(target)
    with pytest.raises(RegistryUnreadable) as info:
        registry.read()
    assert info.value.reason == "not_regular"


@settings(max_examples=60, deadline=None)
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_junk_records_only_ever_give_the_typed_error(raw):
    with tempfile.TemporaryDirectory() as tmp:
        registry = Registry.at(Path(tmp), create=True)
        (registry.root / RECORD).write_bytes(raw)
        os.chmod(registry.root / RECORD, 0o600)
        try:
            record = registry.read()
        except RegistryUnreadable as exc:
            assert exc.reason
        else:
            assert isinstance(record, Record)


# --- the lock ----------------------------------------------------------------------------------------


def test_a_held_lock_is_busy_at_once_and_changes_nothing(registry):
    fd = os.open(registry.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RegistryBusy) as info:
            install(registry)
        assert info.value.code == "registry_busy"
        assert not (registry.root / RECORD).exists()
    finally:
        os.close(fd)
    assert install(registry).digest == digest(1)


# --- install ------------------------------------------------------------------------------------------


def test_install_writes_a_private_root_and_a_canonical_record(registry):
    package = install(registry)
    root = root_of(registry)
    assert (mode(root), mode(root / "files"), mode(root / "files" / "operator" / "pohunek")) == (0o700,) * 3
    assert mode(root / "manifest.json") == 0o600
    assert mode(root / "files" / "bin" / "run") == 0o700
    assert mode(root / "files" / "runtime.toml") == 0o600
    assert (root / "files" / "runtime.toml").read_bytes() == FILES["runtime.toml"][0]
    manifest = json.loads((root / "manifest.json").read_bytes())
    assert manifest["digest"] == digest(1)
    assert [f["path"] for f in manifest["files"]] == sorted(FILES)
    assert package.manifest_digest == "sha256:" + hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    raw = (registry.root / RECORD).read_bytes()
    assert mode(registry.root / RECORD) == 0o600
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    assert registry.read().packages == (package,)


def test_the_first_version_of_an_id_is_enabled_and_selected_later_ones_only_enabled(registry):
    first = install(registry, 1, version="1.0.0")
    second = install(registry, 2, version="1.1.0")
    other = install(registry, 3, package_id="pohunek.runtime.other")
    record = registry.read()
    assert first.enabled and second.enabled
    assert record.selected_package(PACKAGE_ID) == first
    assert record.selected_package("pohunek.runtime.other") == other
    assert record.selected == {PACKAGE_ID: first.digest, "pohunek.runtime.other": other.digest}


def test_reinstalling_the_same_digest_is_idempotent(registry):
    package = install(registry)
    before = (registry.read(), tree_bytes(root_of(registry)))
    assert install(registry) == package
    assert (registry.read(), tree_bytes(root_of(registry))) == before


def test_reinstall_extracts_again_a_recorded_root_that_is_missing(registry):
    package = install(registry)
    tree = tree_bytes(root_of(registry))
    shutil.rmtree(root_of(registry))
    assert install(registry) == package
    assert tree_bytes(root_of(registry)) == tree


def test_an_unrecorded_root_that_verifies_is_adopted(registry):
    install(registry)
    (registry.root / RECORD).unlink()
    package = install(registry)
    assert registry.read().packages == (package,)
    assert registry.read().generation == 1


def test_an_unrecorded_root_with_other_files_is_refused_and_never_replaced(registry):
    install(registry)
    (registry.root / RECORD).unlink()
    tree = tree_bytes(root_of(registry))
    with pytest.raises(RootInvalid):
        install(registry, files={"runtime.toml": (b"other", False)})
    assert tree_bytes(root_of(registry)) == tree
    assert registry.read() == Record(0, (), {})


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"n": 1, "version": "2.0.0"}, "digest_other_identity"),
        ({"n": 1, "source": "explicit_digest"}, "digest_other_identity"),
        ({"n": 2, "version": "1.0.0"}, "identity_other_digest"),
    ],
)
def test_conflicts_are_refused_and_change_nothing(registry, kwargs, reason):
    install(registry)
    raw = (registry.root / RECORD).read_bytes()
    with pytest.raises(PackageConflict) as info:
        install(registry, **kwargs)
    assert info.value.reason == reason
    assert (registry.root / RECORD).read_bytes() == raw
    assert sorted(os.listdir(registry.packages)) == [digest(1).removeprefix("sha256:")]


def test_same_digest_with_other_files_is_refused(registry):
    install(registry)
    with pytest.raises(RootInvalid) as info:
        install(registry, files={**FILES, "runtime.toml": (b"changed", False)})
    assert info.value.reason == "files_differ"


BAD_PATHS = ["../x", "/abs", "a//b", "a b", "a/./b", "", "x" * 101, "a\\b", "é", "a/"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_a_bad_path_is_refused_by_position_without_echoing_it(registry, path):
    files = {"ok": (b"1", False), path: (b"secret bytes", False)}
    with pytest.raises(RootInvalid) as info:
        install(registry, files=files)
    assert info.value.detail == {"reason": "entry_invalid", "entry": 1}
    assert "secret" not in info.value.message and (not path or path not in info.value.message)
    assert not registry.packages.exists()


@pytest.mark.parametrize("paths", [["A", "a"], ["a", "a/b"], ["Dir/x", "dir"]])
def test_colliding_paths_are_refused(registry, paths):
    with pytest.raises(RootInvalid) as info:
        install(registry, files=dict.fromkeys(paths, (b"", False)))
    assert info.value.reason == "path_collision"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"package_id": "../x"}, "package_id"),
        ({"version": ""}, "version"),
        ({"source": "link"}, "source"),
        ({"catalog_state": (-1, frozenset())}, "catalog_state"),
        ({"catalog_state": (1, {"k"})}, "catalog_state"),
    ],
)
def test_malformed_requests_are_typed_errors(registry, kwargs, field):
    with pytest.raises(PackageRequestInvalid) as info:
        install(registry, **kwargs)
    assert info.value.detail == {"field": field}


@pytest.mark.parametrize("bad", ["sha256:" + "A" * 64, "a" * 64, "sha256:" + "0" * 63, 7])
def test_malformed_digests_are_typed_errors(registry, bad):
    with pytest.raises(PackageRequestInvalid):
        registry.install(bad, FILES, package_id=PACKAGE_ID, version="1", source="official", installed_at=0)
    with pytest.raises(PackageRequestInvalid):
        registry.verify_root(bad)


@settings(max_examples=60, deadline=None)
@given(
    files=st.dictionaries(
        st.text(alphabet="ab./-_ \\\x00é", max_size=12),
        st.tuples(st.binary(max_size=8), st.booleans()),
        max_size=5,
    )
)
def test_junk_file_sets_only_ever_give_typed_errors(files):
    with tempfile.TemporaryDirectory() as tmp:
        registry = Registry.at(Path(tmp), create=True)
        try:
            install(registry, files=files)
        except HermesError as exc:
            assert isinstance(exc, RootInvalid)
        else:
            assert registry.verify_root(digest(1)).files == {p: v[0] for p, v in files.items()}


# --- selectors, enable, select, uninstall ----------------------------------------------------------


def test_every_mutation_bumps_the_generation(registry):
    install(registry, 1, version="1.0.0")
    install(registry, 2, version="1.1.0")
    registry.select(PACKAGE_ID, version="1.1.0")
    registry.set_enabled(PACKAGE_ID, False, version="1.0.0")
    registry.set_enabled(PACKAGE_ID, True, digest=digest(1))
    registry.uninstall(PACKAGE_ID, version="1.0.0")
    assert registry.read().generation == 6


@pytest.mark.parametrize("action", ["select", "enable", "disable", "uninstall"])
def test_selectors_never_guess(registry, action):
    install(registry, 1, version="1.0.0")
    install(registry, 2, version="1.1.0")
    run = {
        "select": registry.select,
        "enable": lambda pid, **kw: registry.set_enabled(pid, True, **kw),
        "disable": lambda pid, **kw: registry.set_enabled(pid, False, **kw),
        "uninstall": registry.uninstall,
    }[action]
    before = (registry.root / RECORD).read_bytes()
    with pytest.raises(SelectorAmbiguous) as info:
        run(PACKAGE_ID)
    assert info.value.detail == {"count": 2}
    for selector in ({}, {"version": "9.9.9"}, {"digest": digest(3)}):
        with pytest.raises(PackageNotInstalled):
            run("pohunek.runtime.none", **selector)
    with pytest.raises(PackageNotInstalled):
        run(PACKAGE_ID, version="1.0.0", digest=digest(2))
    assert (registry.root / RECORD).read_bytes() == before


def test_select_needs_an_enabled_package_with_a_verifying_root(registry):
    install(registry, 1, version="1.0.0")
    second = install(registry, 2, version="1.1.0")
    registry.set_enabled(PACKAGE_ID, False, version="1.1.0")
    with pytest.raises(PackageDisabled):
        registry.select(PACKAGE_ID, version="1.1.0")
    registry.set_enabled(PACKAGE_ID, True, version="1.1.0")
    (root_of(registry, 2) / "files" / "runtime.toml").write_bytes(b"tampered")
    with pytest.raises(RootInvalid):
        registry.select(PACKAGE_ID, version="1.1.0")
    with pytest.raises(RootInvalid):
        registry.set_enabled(PACKAGE_ID, True, version="1.1.0")
    assert registry.read().selected[PACKAGE_ID] == digest(1) != second.digest


def test_disabling_the_selected_package_keeps_the_selection(registry):
    install(registry)
    disabled = registry.set_enabled(PACKAGE_ID, False)
    assert not disabled.enabled
    assert registry.read().selected_package(PACKAGE_ID) == disabled


def test_uninstall_unrecords_then_deletes_and_drops_the_selection(registry):
    first = install(registry, 1, version="1.0.0")
    install(registry, 2, version="1.1.0")
    assert registry.uninstall(PACKAGE_ID, version="1.1.0").digest == digest(2)
    assert registry.read().selected == {PACKAGE_ID: first.digest}
    assert not root_of(registry, 2).exists()
    assert registry.uninstall(PACKAGE_ID) == first
    assert registry.read().selected == {}
    assert os.listdir(registry.packages) == []
