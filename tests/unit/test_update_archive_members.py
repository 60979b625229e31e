"""An archive update's refusals before anything is written: members that leave the tree,
links and devices, an archive that does not name its commit, junk, the size cap, and the
settings."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from services.updater import archive as archive_mod
from services.updater.archive import (
    ArchiveFailed,
    ArchiveUnsafe,
    unpack,
)

pytestmark = pytest.mark.usefixtures("isolated_git")


def _zip(
    tmp_path: Path, members: dict[str, bytes], *, comment: bytes = b"a" * 40, links: dict[str, str] | None = None
) -> Path:
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.comment = comment
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, target)
    return path


@pytest.mark.parametrize(
    "members, links",
    [
        ({"r/../../escape": b"x"}, {}),
        ({"/etc/evil": b"x"}, {}),
        ({"r/.git/config": b"x"}, {}),
        ({"r/a": b"x"}, {"r/link": "../../outside"}),
        ({"r/a": b"x"}, {"r/abs": "/etc/passwd"}),
    ],
)
def test_a_member_that_leaves_the_tree_is_refused(tmp_path, members, links):
    with pytest.raises(ArchiveUnsafe):
        unpack(_zip(tmp_path, members, links=links), tmp_path / "tree")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "outside").exists()


def test_tar_hard_links_and_devices_are_refused(tmp_path):
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w", pax_headers={"comment": "b" * 40}) as tf:
        info = tarfile.TarInfo("r/dev")
        info.type = tarfile.CHRTYPE
        tf.addfile(info)
    with pytest.raises(ArchiveUnsafe):
        unpack(path, tmp_path / "tree")


@pytest.mark.parametrize("comment", [b"", b"not a commit"])
def test_an_archive_that_does_not_name_its_commit_is_refused(tmp_path, comment):
    with pytest.raises(ArchiveFailed, match="which commit"):
        unpack(_zip(tmp_path, {"r/a": b"x"}, comment=comment), tmp_path / "tree")


def test_junk_and_truncated_archives_are_typed_failures(tmp_path):
    (tmp_path / "junk").write_bytes(b"<html>not found</html>")
    with pytest.raises(ArchiveFailed):
        unpack(tmp_path / "junk", tmp_path / "t1")
    good = _zip(tmp_path, {"r/a": b"x" * 10_000})
    (tmp_path / "cut.zip").write_bytes(good.read_bytes()[:-200])
    with pytest.raises(ArchiveFailed):
        unpack(tmp_path / "cut.zip", tmp_path / "t2")


def test_the_unpacked_size_is_capped_by_what_comes_out(tmp_path, monkeypatch):
    monkeypatch.setattr(archive_mod, "MAX_UNPACKED", 1000)
    with pytest.raises(ArchiveFailed, match="more than"):
        unpack(_zip(tmp_path, {"r/big": b"\0" * 5000}), tmp_path / "tree")


# --- settings ----------------------------------------------------------------------------------


def test_settings_come_from_the_root_config_and_are_checked(tmp_path):
    from services.updater.settings import load_settings
    from shared.config import ConfigError

    assert load_settings(tmp_path).archive_url is None  # no config: no fallback
    (tmp_path / "config.yaml").write_text(
        "update:\n  branch: stable\n  archive_url: https://example.invalid/{branch}.zip\n"
        "  preserved_nested: [web/dist]\n"
    )
    settings = load_settings(tmp_path)
    assert (settings.branch, settings.preserved_nested) == ("stable", ("web/dist",))
    assert (settings.min_healthy, settings.step_timeout) == (10.0, 600.0)  # the defaults
    (tmp_path / "config.yaml").write_text("update:\n  min_healthy: 2.5\n  step_timeout: 30\n")
    assert (load_settings(tmp_path).min_healthy, load_settings(tmp_path).step_timeout) == (2.5, 30.0)
    assert settings.canary is True  # the default
    (tmp_path / "config.yaml").write_text("update:\n  canary: false\n  max_parallel: 2\n")
    assert (load_settings(tmp_path).canary, load_settings(tmp_path).max_parallel) == (False, 2)
    assert settings.max_parallel == 0  # the default: one wave
    for bad, key in [
        ("update: [1]", "update"),
        ("update:\n  archive_url: file:///tmp/{branch}", "update.archive_url"),
        ("update:\n  preserved_nested: [../outside]", "update.preserved_nested"),
        ("update:\n  preserved_nested: [node_modules]", "update.preserved_nested"),
        ("update:\n  branch: 7", "update.branch"),
        ("update:\n  min_healthy: soon", "update.min_healthy"),
        ("update:\n  min_healthy: -1", "update.min_healthy"),
        ("update:\n  min_healthy: 3601", "update.min_healthy"),
        ("update:\n  min_healthy: true", "update.min_healthy"),
        ("update:\n  min_healthy: .nan", "update.min_healthy"),
        ("update:\n  step_timeout: 0", "update.step_timeout"),
        ("update:\n  step_timeout: 86401", "update.step_timeout"),
        ("update:\n  step_timeout: '60'", "update.step_timeout"),
        ("update:\n  step_timeout: .inf", "update.step_timeout"),
        ("update:\n  canary: 0", "update.canary"),
        ("update:\n  max_parallel: -1", "update.max_parallel"),
        ("update:\n  max_parallel: 1001", "update.max_parallel"),
        ("update:\n  max_parallel: 2.5", "update.max_parallel"),
        ("update:\n  max_parallel: true", "update.max_parallel"),
        ("update:\n  canary: 'no'", "update.canary"),
    ]:
        (tmp_path / "config.yaml").write_text(bad + "\n")
        with pytest.raises(ConfigError) as caught:
            load_settings(tmp_path)
        assert caught.value.key == key and "config.yaml" in caught.value.message
