"""``hermes operator package install`` refusing what it must before it touches anything: an
archive the catalog does not list is never decompressed, a FIFO is never waited on, and a
refused install leaves the state as it found it."""

from __future__ import annotations

import os

import pytest
import zstandard

from tests.support.runtime_package import PackageKit


@pytest.fixture
def kit(tmp_path):
    return PackageKit(tmp_path)


def state_entries(kit) -> list[str]:
    return sorted(p.relative_to(kit.state).as_posix() for p in kit.state.rglob("*"))


@pytest.mark.parametrize(
    "content",
    [
        os.urandom(4096),
        # Expands past the reader's ratio: decompressing it first would be ratio_exceeded.
        zstandard.ZstdCompressor(level=3, write_checksum=True).compress(bytes(32 * 2**20)),
    ],
    ids=["garbage", "bomb"],
)
def test_an_archive_the_catalog_does_not_list_gets_the_catalogs_refusal(kit, tmp_path, content):
    listed = kit.sign([kit.build()])
    unlisted = tmp_path / "unlisted.tar.zst"
    unlisted.write_bytes(content)
    code, data = kit.cli_json("operator", "package", "install", str(unlisted), "--catalog", str(listed))
    assert code == 2 and data["error"]["code"] == "package_not_authorized", data
    assert data["error"]["detail"]["reason"] == "no_entry"
    assert state_entries(kit) == []


@pytest.mark.parametrize("given", ["archive", "catalog"])
def test_a_fifo_is_refused_naming_the_argument_and_never_waited_on(kit, tmp_path, given):
    path = kit.build()
    signed = kit.sign([path])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    archive, catalog = (fifo, signed) if given == "archive" else (path, fifo)
    code, data = kit.cli_json("operator", "package", "install", str(archive), "--catalog", str(catalog), timeout=30)
    assert code == 2 and data["error"]["code"] == "package_input_unreadable", data
    assert data["error"]["detail"] == {"what": given, "reason": "not_regular"}
    assert given in data["error"]["message"]
    assert state_entries(kit) == []


def test_a_symlinked_archive_is_refused(kit, tmp_path):
    path = kit.build()
    link = tmp_path / "link.tar.zst"
    link.symlink_to(path)
    code, data = kit.cli_json("operator", "package", "install", str(link), "--catalog", str(kit.sign([path])))
    assert code == 2 and data["error"]["code"] == "package_input_unreadable", data
    assert data["error"]["detail"] == {"what": "archive", "reason": "symlink"}


def test_a_refused_install_into_a_fresh_state_creates_nothing(kit, tmp_path):
    path = kit.build()
    for catalog, code_wanted in (
        (kit.sign([path], expires_in=-1), "catalog_expired"),
        (kit.sign([kit.build(kit.tree(version="1.0.1"))]), "package_not_authorized"),
    ):
        code, data = kit.cli_json("operator", "package", "install", str(path), "--catalog", str(catalog))
        assert code == 2 and data["error"]["code"] == code_wanted, data
        assert state_entries(kit) == []
    kit.install_package(path)
    assert "plugins/registry.json" in state_entries(kit)
