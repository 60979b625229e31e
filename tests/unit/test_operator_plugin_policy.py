"""The plugin's policy loader on real files: only the owner's private regular file, at most
64 KiB of strict JSON, loads; everything else is ``InvalidPolicy`` that repeats nothing the
file holds."""

from __future__ import annotations

import json
import os

import pytest

from shared.operator import policy_file as loader
from shared.operator.policy import InvalidPolicy
from tests.support.operator_plugin import policy_fields, write_policy

ENDPOINT = "ipc:///run/pohunek/daemon.sock"
SECRET = "hunter2-secret"


def refused(path: object) -> InvalidPolicy:
    """The refusal of ``path`` (a ``Path`` is passed as its str, as the rendered token is)."""
    with pytest.raises(InvalidPolicy) as caught:
        loader.load_policy(str(path) if isinstance(path, os.PathLike) else path)
    assert caught.value.code == "hermes_invalid_policy"
    return caught.value


@pytest.fixture
def good(tmp_path):
    return write_policy(tmp_path / "policy" / "pohunek.json", policy_fields(ENDPOINT))


def raw_file(tmp_path, data: bytes, mode: int = 0o600):
    path = tmp_path / "raw.json"
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_a_good_file_loads(good):
    policy = loader.load_policy(str(good))
    assert policy.daemon_endpoint == ENDPOINT
    assert policy.allowed_hosts == ("local",)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_an_owner_only_file_loads(tmp_path, mode):
    path = write_policy(tmp_path / "p.json", policy_fields(ENDPOINT), mode=mode)
    assert loader.load_policy(str(path)).access_mode == "manage"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o601, 0o610])
def test_a_file_open_to_group_or_others_is_refused(tmp_path, mode):
    path = write_policy(tmp_path / "p.json", policy_fields(ENDPOINT), mode=mode)
    error = refused(path)
    assert "group or others" in error.message


def test_a_symlink_to_a_good_file_is_refused(good, tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert loader.load_policy(str(good)).access_mode == "manage"  # the target itself is fine
    error = refused(link)
    assert "symlink" in error.message


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root (the test tier runs as root)")
def test_a_file_of_another_owner_is_refused(good):
    os.chown(good, 65534, 65534)
    error = refused(good)
    assert "another user" in error.message


def test_a_directory_is_refused(tmp_path):
    directory = tmp_path / "dir.json"
    directory.mkdir(mode=0o700)
    error = refused(directory)
    assert "regular file" in error.message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)
    error = refused(fifo)
    assert "regular file" in error.message


def test_a_missing_file_is_refused(tmp_path):
    error = refused(tmp_path / "absent.json")
    assert "cannot be opened" in error.message


def test_64_kib_loads_and_one_byte_more_is_refused(tmp_path):
    text = json.dumps(policy_fields(ENDPOINT))
    exact = raw_file(tmp_path, (text + " " * (64 * 1024 - len(text))).encode())
    assert exact.stat().st_size == 64 * 1024
    assert loader.load_policy(str(exact)).max_concurrency == 8
    over = raw_file(tmp_path, (text + " " * (64 * 1024 + 1 - len(text))).encode())
    error = refused(over)
    assert "larger than" in error.message


def test_invalid_utf8_is_refused(tmp_path):
    data = json.dumps(policy_fields(ENDPOINT)).encode().replace(b"local", b"loc\xffal")
    error = refused(raw_file(tmp_path, data))
    assert "UTF-8" in error.message


def test_duplicate_keys_are_refused(tmp_path):
    text = json.dumps(policy_fields(ENDPOINT))
    duplicated = text[:-1] + ', "access_mode": "full"}'
    error = refused(raw_file(tmp_path, duplicated.encode()))
    assert "strict JSON" in error.message


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(tmp_path, constant):
    text = json.dumps(policy_fields(ENDPOINT, max_concurrency=1)).replace(
        '"max_concurrency": 1', f'"max_concurrency": {constant}'
    )
    assert constant in text
    error = refused(raw_file(tmp_path, text.encode()))
    assert "strict JSON" in error.message


def test_a_json_array_is_refused(tmp_path):
    error = refused(raw_file(tmp_path, json.dumps([policy_fields(ENDPOINT)]).encode()))
    assert error.detail["field"] == "policy"


@pytest.mark.parametrize("data", [b"", b"{", b"{} {}", b"[" * 60_000, b'{"a": 1' + b"0" * 5000 + b"}"])
def test_broken_or_hostile_json_is_refused(tmp_path, data):
    error = refused(raw_file(tmp_path, data))
    assert "strict JSON" in error.message


def test_a_policy_that_breaks_a_rule_is_refused_with_its_field(tmp_path):
    path = write_policy(tmp_path / "p.json", policy_fields(ENDPOINT, tool_timeout_ms=60_001))
    error = refused(path)
    assert error.detail["field"] == "tool_timeout_ms"


def test_no_refusal_repeats_what_the_file_holds(tmp_path):
    for data in [f'{{"{SECRET}": 1'.encode(), f'["{SECRET}"]'.encode(), f"{SECRET}\xff".encode("latin-1")]:
        error = refused(raw_file(tmp_path, data))
        assert SECRET not in str(error) and SECRET not in str(error.detail)


def test_an_unmaterialized_token_is_refused():
    error = refused(None)
    assert "never filled in" in error.message


@pytest.mark.parametrize("path", ["pohunek.json", "./pohunek.json", "", 7, b"/etc/policy.json", "/tmp/a\x00b"])
def test_a_relative_or_non_string_path_is_refused(good, path, monkeypatch):
    monkeypatch.chdir(good.parent)  # a relative path that would resolve to a good file
    error = refused(path)
    assert "absolute path" in error.message
