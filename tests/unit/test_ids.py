"""The install id (made once in the root home, never replaced) and the instance id."""

from __future__ import annotations

import os

import pytest

from shared import ids


def test_the_install_id_is_made_once_and_then_read_back(tmp_path):
    assert ids.read_install_id(tmp_path) is None
    made = ids.ensure_install_id(tmp_path)
    assert ids.is_id(made)
    assert ids.ensure_install_id(tmp_path) == made == ids.read_install_id(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [ids.INSTALL_ID_FILE]  # no temp file left behind


def test_an_existing_id_is_never_replaced(tmp_path):
    mine = "0123456789abcdef" * 2
    (tmp_path / ids.INSTALL_ID_FILE).write_text(mine + "\n")
    assert ids.ensure_install_id(tmp_path) == mine


@pytest.mark.parametrize("junk", [b"", b"not an id\n", b"ABCDEF0123456789" * 2, b"\xff" * 32, b"0" * 300])
def test_a_corrupt_id_file_is_a_typed_error_and_is_left_alone(tmp_path, junk):
    path = tmp_path / ids.INSTALL_ID_FILE
    path.write_bytes(junk)
    with pytest.raises(ids.InstallIdCorrupt) as caught:
        ids.ensure_install_id(tmp_path)
    assert caught.value.code == "install_id_corrupt"
    assert path.read_bytes() == junk


def test_an_unreadable_id_file_is_corrupt_too(tmp_path):
    (tmp_path / ids.INSTALL_ID_FILE).mkdir()
    with pytest.raises(ids.InstallIdCorrupt):
        ids.read_install_id(tmp_path)


def test_a_service_reports_no_install_id_rather_than_failing(tmp_path, caplog):
    (tmp_path / ids.INSTALL_ID_FILE).write_text("junk")
    assert ids.describe(tmp_path) == {"install_id": None, "instance_id": ids.instance_id()}
    missing = tmp_path / "no-such-root"
    assert ids.describe(missing)["install_id"] is None  # cannot be written: still serves
    assert "no install id" in caplog.text


def test_the_instance_id_is_one_per_process_start():
    assert ids.is_id(ids.instance_id())
    assert ids.instance_id() == ids.instance_id()


@pytest.mark.parametrize("value", [None, 1, "", "0" * 31, "0" * 33, "g" * 32, "0" * 31 + "\n"])
def test_what_is_not_an_id(value):
    assert not ids.is_id(value)
