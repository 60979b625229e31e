"""A package directory read into archive entries: everything or a refusal, never a skip."""

from __future__ import annotations

import pytest

from runtime_package import archive
from runtime_package.archive_dir import PackageDirInvalid, entries_from_dir


def test_every_file_becomes_an_entry_with_its_relative_path(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_bytes(b"deep")
    (tmp_path / "top").write_bytes(b"top")
    (tmp_path / "top").chmod(0o744)
    entries = {e.path: e for e in entries_from_dir(tmp_path)}
    assert {p: (e.data, e.executable) for p, e in entries.items()} == {
        "a/b/c.txt": (b"deep", False),
        "top": (b"top", True),
    }


def test_a_symlinked_directory_is_refused_not_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"x")
    (tmp_path / "alias").symlink_to("real", target_is_directory=True)
    with pytest.raises(PackageDirInvalid) as caught:
        entries_from_dir(tmp_path)
    assert caught.value.detail == {"path": "alias", "problem": "is a symlink"}


def test_a_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_FILE", 4)
    (tmp_path / "big").write_bytes(b"12345")
    with pytest.raises(PackageDirInvalid, match="larger than 4 bytes"):
        entries_from_dir(tmp_path)


def test_too_many_files_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_FILES", 2)
    for name in "abc":
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(PackageDirInvalid, match="limit of 2 files"):
        entries_from_dir(tmp_path)


def test_a_path_that_is_not_a_directory_is_refused(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(PackageDirInvalid, match="not a directory"):
        entries_from_dir(tmp_path / "file")


def test_a_hostile_name_stays_on_one_printable_line(tmp_path):
    (tmp_path / "bad\nname").write_bytes(b"x")
    with pytest.raises(PackageDirInvalid) as caught:
        entries_from_dir(tmp_path)
    assert "\n" not in caught.value.message and "bad\\nname" in caught.value.message


def test_the_entries_build_the_archive_the_reader_accepts(tmp_path):
    (tmp_path / "runtime.toml").write_bytes(b"schema = 1\n")
    entries = entries_from_dir(tmp_path)
    assert archive.read(archive.build(entries)) == entries
