"""verify_root: every way a published package root can stop matching its manifest and record."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime_package.registry import Registry, RootInvalid
from tests.support.registry_packages import BIN_RUN, FILES, OPERATOR_INIT, RUNTIME_TOML, digest, install, root_of


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    registry = Registry.at(tmp_path / "state", create=True)
    install(registry, 1, version="1.0.0")
    install(registry, 2, version="2.0.0", files={"other.txt": (b"other", False)})
    return registry


def files_of(registry: Registry) -> Path:
    return root_of(registry) / "files"


def test_an_intact_root_returns_the_hashed_bytes(registry):
    root = registry.verify_root(digest(1))
    assert root.files == {path: data for path, (data, _) in FILES.items()}
    assert root.executable == frozenset({"bin/run"})
    assert root.path == root_of(registry)
    assert root.digest == digest(1)


def _add_file(r: Registry) -> None:
    (files_of(r) / "bin" / "extra").write_bytes(b"x")


def _add_top_level(r: Registry) -> None:
    (root_of(r) / "notes").write_bytes(b"x")


def _add_empty_dir(r: Registry) -> None:
    (files_of(r) / "empty").mkdir(mode=0o700)


def _remove(r: Registry) -> None:
    (files_of(r) / "runtime.toml").unlink()


def _modify(r: Registry) -> None:
    path = files_of(r) / "runtime.toml"
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b"?")


def _truncate(r: Registry) -> None:
    os.truncate(files_of(r) / "runtime.toml", 3)


def _exec_bit_off(r: Registry) -> None:
    os.chmod(files_of(r) / "bin" / "run", 0o600)


def _exec_bit_on(r: Registry) -> None:
    os.chmod(files_of(r) / "runtime.toml", 0o700)


def _world_writable(r: Registry) -> None:
    os.chmod(files_of(r) / "runtime.toml", 0o666)


def _symlink_swap(r: Registry) -> None:
    path = files_of(r) / "runtime.toml"
    copy = root_of(r).parent.parent / "copy.toml"
    shutil.copy(path, copy)
    path.unlink()
    path.symlink_to(copy)


def _fifo_swap(r: Registry) -> None:
    path = files_of(r) / "runtime.toml"
    path.unlink()
    os.mkfifo(path, 0o600)


def _dir_swap(r: Registry) -> None:
    path = files_of(r) / "runtime.toml"
    path.unlink()
    path.mkdir(mode=0o700)


def _dir_to_symlink(r: Registry) -> None:
    directory = files_of(r) / "operator"
    moved = root_of(r).parent.parent / "moved"
    directory.rename(moved)
    directory.symlink_to(moved)


def _hard_link(r: Registry) -> None:
    os.link(files_of(r) / "runtime.toml", root_of(r).parent.parent / "second-name")


def _dir_mode(r: Registry) -> None:
    os.chmod(files_of(r) / "operator", 0o755)


def _files_dir_mode(r: Registry) -> None:
    os.chmod(files_of(r), 0o755)


def _manifest_edited(r: Registry) -> None:
    # Still a well-formed manifest for this digest, and the files match it: only the record knows.
    path = root_of(r) / "manifest.json"
    manifest = json.loads(path.read_bytes())
    manifest["files"] = [f for f in manifest["files"] if f["path"] != "runtime.toml"]
    path.write_bytes(json.dumps(manifest).encode())
    (files_of(r) / "runtime.toml").unlink()


def _manifest_of_another_digest(r: Registry) -> None:
    shutil.copy(root_of(r, 2) / "manifest.json", root_of(r) / "manifest.json")


def _manifest_junk(r: Registry) -> None:
    (root_of(r) / "manifest.json").write_bytes(b"{junk")


def _manifest_unknown_field(r: Registry) -> None:
    path = root_of(r) / "manifest.json"
    manifest = json.loads(path.read_bytes())
    manifest["extra"] = 1
    path.write_bytes(json.dumps(manifest).encode())


def _manifest_missing(r: Registry) -> None:
    (root_of(r) / "manifest.json").unlink()


def _manifest_mode(r: Registry) -> None:
    os.chmod(root_of(r) / "manifest.json", 0o644)


def _root_missing(r: Registry) -> None:
    shutil.rmtree(root_of(r))


def _root_to_symlink(r: Registry) -> None:
    moved = root_of(r).parent.parent / "root-moved"
    root_of(r).rename(moved)
    root_of(r).symlink_to(moved)


FINDINGS: dict[str, tuple[Callable[[Registry], None], str, int | None]] = {
    "added file": (_add_file, "added_entry", None),
    "added top-level entry": (_add_top_level, "added_entry", None),
    "added directory": (_add_empty_dir, "added_entry", None),
    "removed": (_remove, "missing", RUNTIME_TOML),
    "modified": (_modify, "content_mismatch", RUNTIME_TOML),
    "truncated": (_truncate, "size_mismatch", RUNTIME_TOML),
    "exec bit cleared": (_exec_bit_off, "mode_mismatch", BIN_RUN),
    "exec bit set": (_exec_bit_on, "mode_mismatch", RUNTIME_TOML),
    "mode 0666": (_world_writable, "mode_mismatch", RUNTIME_TOML),
    "file swapped for a symlink": (_symlink_swap, "not_regular", RUNTIME_TOML),
    "file swapped for a fifo": (_fifo_swap, "not_regular", RUNTIME_TOML),
    "file swapped for a directory": (_dir_swap, "not_regular", RUNTIME_TOML),
    "directory swapped for a symlink": (_dir_to_symlink, "added_entry", None),
    "hard link": (_hard_link, "hard_link", RUNTIME_TOML),
    "directory mode 0755": (_dir_mode, "directory_unsafe_mode", None),
    "files directory mode 0755": (_files_dir_mode, "files_unsafe_mode", None),
    "manifest edited": (_manifest_edited, "manifest_modified", None),
    "manifest of another digest": (_manifest_of_another_digest, "manifest_foreign", None),
    "manifest malformed": (_manifest_junk, "manifest_malformed", None),
    "manifest with an unknown field": (_manifest_unknown_field, "manifest_malformed", None),
    "manifest missing": (_manifest_missing, "manifest_missing", None),
    "manifest mode 0644": (_manifest_mode, "manifest_unsafe_mode", None),
    "root missing": (_root_missing, "root_missing", None),
    "root swapped for a symlink": (_root_to_symlink, "root_not_directory", None),
}


@pytest.mark.parametrize("case", list(FINDINGS))
def test_each_finding_is_a_typed_error_naming_only_a_position(registry, case):
    tamper, reason, entry = FINDINGS[case]
    tamper(registry)
    with pytest.raises(RootInvalid) as info:
        registry.verify_root(digest(1))
    assert info.value.code == "package_root_invalid"
    expected = {"reason": reason} if entry is None else {"reason": reason, "entry": entry}
    assert info.value.detail == expected
    for leaked in ("runtime.toml", "bin", "operator", "hermes", str(registry.root)):
        assert leaked not in info.value.message
    # The other root is untouched by the finding.
    assert registry.verify_root(digest(2)).files == {"other.txt": b"other"}


def test_a_root_whose_manifest_differs_from_the_record_is_not_adopted(registry):
    _manifest_edited(registry)
    with pytest.raises(RootInvalid):
        install(registry, 1, version="1.0.0")
    assert registry.doctor()["roots"][0] == {"digest": digest(1), "ok": False, "reason": "manifest_modified"}


def test_positions_follow_the_manifest_order(registry):
    os.chmod(files_of(registry) / "operator" / "pohunek" / "__init__.py", 0o640)
    with pytest.raises(RootInvalid) as info:
        registry.verify_root(digest(1))
    assert info.value.entry == OPERATOR_INIT
