"""``package install`` asks the catalog about the raw archive's digest before it decompresses a
byte: watched in-process, on the very functions that decompress."""

from __future__ import annotations

import argparse
import os

import pytest

from hermes_cli.commands import operator_package
from runtime_package import archive, catalog
from tests.support.runtime_package import PackageKit


@pytest.fixture
def kit(tmp_path, monkeypatch):
    kit = PackageKit(tmp_path)
    for name, value in kit.env.items():
        monkeypatch.setenv(name, value)
    return kit


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The size of every archive ``archive.read`` was given."""
    seen: list[int] = []
    real = archive.read

    def watched(data: bytes, expected_digest: str | None = None) -> list[archive.Entry]:
        seen.append(len(data))
        return real(data, expected_digest=expected_digest)

    monkeypatch.setattr(archive, "read", watched)
    return seen


def install(path, signed) -> int:
    return operator_package.cmd_install(argparse.Namespace(archive=str(path), catalog=str(signed), json=True))


def test_an_unlisted_archive_is_refused_before_it_is_decompressed(kit, tmp_path, reads):
    listed = kit.build()
    signed = kit.sign([listed])
    unlisted = tmp_path / "unlisted.tar.zst"
    unlisted.write_bytes(os.urandom(1024))
    reads.clear()
    with pytest.raises(catalog.NotAuthorized) as refused:
        install(unlisted, signed)
    assert refused.value.reason == "no_entry"
    assert reads == []
    assert install(listed, signed) == 0
    assert reads == [listed.stat().st_size]


def test_a_revoked_digest_is_refused_before_it_is_decompressed(kit, reads):
    path = kit.build()
    document = catalog.strict_loads(kit.sign([kit.build(kit.tree(version="1.0.1"))]).read_bytes())["catalog"]
    document["revoked_digests"] = [archive.digest(path.read_bytes())]
    signed = kit.base / "revoking.json"
    signed.write_bytes(catalog.sign_catalog(document, kit.seed))
    reads.clear()
    with pytest.raises(catalog.NotAuthorized) as refused:
        install(path, signed)
    assert refused.value.reason == "digest_revoked" and reads == []
