"""Atomic state files, strict reads, and locked read-modify-write within this process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from shared.files import (
    LockTimeout,
    StateFileCorrupt,
    locked,
    read_json,
    update_json,
    write_bytes_atomic,
    write_json_atomic,
)
from tests.support.atomic_writes import temp_leftovers


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Sets a umask for one test and restores the old one."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


# --- writes ---------------------------------------------------------------------------------


def test_round_trip(tmp_path):
    path = tmp_path / "state.json"
    data = {"name": "héllo ✓", "n": [1, 2.5, None, True], "nested": {"a": {}}}
    write_json_atomic(path, data)
    assert read_json(path) == data
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert "héllo ✓" in text  # ensure_ascii=False
    assert text.index('"name"') < text.index('"n"') < text.index('"nested"')  # insertion order kept
    assert temp_leftovers(tmp_path) == []


def test_overwrite_replaces_content(tmp_path):
    path = tmp_path / "state.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert read_json(path) == {"v": 2}


def test_secret_is_0600_even_with_umask_0(tmp_path, umask):
    umask(0)
    path = tmp_path / "token.json"
    write_json_atomic(path, {"token": "s3cret"}, secret=True)
    assert _mode(path) == 0o600


def test_non_secret_is_exactly_0644_whatever_the_umask(tmp_path, umask):
    # 0644 regardless of the umask: a restrictive umask must not hide state from readers,
    # and a permissive one must not make it writable by others.
    for value in (0o077, 0o000, 0o022):
        umask(value)
        path = tmp_path / f"state-{value:o}.json"
        write_json_atomic(path, {"a": 1})
        assert _mode(path) == 0o644


def test_secret_replaces_a_wider_existing_file(tmp_path):
    path = tmp_path / "token.json"
    path.write_text('{"token": "old"}')
    os.chmod(path, 0o666)
    write_json_atomic(path, {"token": "new"}, secret=True)
    assert _mode(path) == 0o600
    assert read_json(path) == {"token": "new"}


def test_write_bytes_atomic_mode(tmp_path):
    path = tmp_path / "blob"
    write_bytes_atomic(path, b"\x00\x01", mode=0o640)
    assert path.read_bytes() == b"\x00\x01"
    assert _mode(path) == 0o640


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": float("nan")}, {"x": {1, 2}}])
def test_failed_serialization_leaves_old_file_and_no_temp(tmp_path, bad):
    path = tmp_path / "state.json"
    write_json_atomic(path, {"v": 1})
    before = path.read_bytes()
    with pytest.raises((TypeError, ValueError)):
        write_json_atomic(path, bad)
    assert path.read_bytes() == before
    assert temp_leftovers(tmp_path) == []


def test_failed_write_removes_temp_and_keeps_old(tmp_path):
    path = tmp_path / "state.json"
    write_json_atomic(path, {"v": 1})
    before = path.read_bytes()
    # Not bytes-like: fails inside the write loop, after the temp file exists.
    with pytest.raises(TypeError):
        write_bytes_atomic(path, object())  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert temp_leftovers(tmp_path) == []


def test_failed_rename_removes_temp(tmp_path):
    target = tmp_path / "occupied"
    (target / "child").mkdir(parents=True)
    with pytest.raises(OSError):
        write_json_atomic(target, {"v": 1})
    assert (target / "child").is_dir()
    assert temp_leftovers(tmp_path) == []


def test_write_into_missing_directory_fails_cleanly(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_json_atomic(tmp_path / "absent" / "state.json", {})


# --- reads ----------------------------------------------------------------------------------


def test_missing_file_gives_default_or_raises(tmp_path):
    path = tmp_path / "absent.json"
    assert read_json(path, default={"fresh": True}) == {"fresh": True}
    assert read_json(path, default=None) is None
    with pytest.raises(FileNotFoundError):
        read_json(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b'{"a": 1', "invalid JSON"),
        (b'{"a": 1}{"b": 2}', "invalid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"a": NaN}', "NaN"),
        (b"[1, 2]", "array, expected object"),
        (b"null", "null, expected object"),
        (b'"text"', "string, expected object"),
    ],
)
def test_corrupt_files_raise_and_are_not_modified(tmp_path, content, reason):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    for kwargs in ({}, {"default": {"ignored": True}}):
        with pytest.raises(StateFileCorrupt, match=reason) as info:
            read_json(path, **kwargs)
        err = info.value
        assert err.code == "state_file_corrupt"
        assert err.path == path
        assert str(path) in err.message
        assert err.to_dict()["detail"]["path"] == str(path)
    assert path.read_bytes() == content


def test_expect_other_types(tmp_path):
    path = tmp_path / "list.json"
    write_json_atomic(path, [1, 2])
    assert read_json(path, expect=list) == [1, 2]
    assert read_json(path, expect=None) == [1, 2]
    with pytest.raises(StateFileCorrupt, match="expected object or null"):
        read_json(path, expect=(dict, type(None)))


# --- update_json and locks --------------------------------------------------------------------


def test_update_json_creates_from_default_without_mutating_it(tmp_path):
    path = tmp_path / "counter.json"
    default = {"n": 0, "seen": []}

    def bump(d):
        d["n"] += 1
        d["seen"].append(d["n"])
        return d

    assert update_json(path, bump, default=default) == {"n": 1, "seen": [1]}
    assert update_json(path, bump, default=default) == {"n": 2, "seen": [1, 2]}
    assert default == {"n": 0, "seen": []}
    assert (tmp_path / "counter.json.lock").exists()
    assert _mode(tmp_path / "counter.json.lock") == 0o600


def test_update_json_missing_without_default_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        update_json(tmp_path / "absent.json", lambda d: d)
    assert not (tmp_path / "absent.json").exists()


def test_update_json_on_corrupt_file_does_not_call_fn(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b'{"torn": ')
    calls = []
    with pytest.raises(StateFileCorrupt):
        update_json(path, lambda d: calls.append(d) or d, default={})
    assert calls == []
    assert path.read_bytes() == b'{"torn": '


def test_update_json_rejects_wrong_result_type(tmp_path):
    path = tmp_path / "state.json"
    write_json_atomic(path, {"v": 1})
    with pytest.raises(TypeError, match="returned null"):
        update_json(path, lambda d: d.update(v=2))  # forgot to return
    assert read_json(path) == {"v": 1}


def test_update_json_secret(tmp_path):
    path = tmp_path / "secret.json"
    update_json(path, lambda d: {**d, "k": "v"}, default={}, secret=True)
    assert _mode(path) == 0o600


def test_locked_excludes_a_second_holder_in_the_same_process(tmp_path):
    path = tmp_path / "state.json"
    with locked(path):
        with pytest.raises(LockTimeout):
            with locked(path, timeout=0.05):
                pass
    with locked(path, timeout=0.05):
        pass
