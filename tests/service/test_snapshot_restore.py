"""``hermes snapshot restore``'s rules on real homes (discovery asks the control sockets, so
this is the service tier): what comes back, what is kept, and every snapshot refused whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from services.updater.snapshot import MANIFEST, snapshot_all
from services.updater.snapshot_restore import SnapshotUnusable, list_snapshots, restore_snapshot


@pytest.fixture
def snapped(root: Path) -> Path:
    """The root home with a few files of the set, snapshotted by update u1; the snapshot dir."""
    (root / "config.yaml").write_text("model: a\n")
    (root / ".env").write_text("TOKEN=x\n")
    os.chmod(root / ".env", 0o600)
    (root / "cron").mkdir()
    (root / "cron" / "jobs.json").write_text('[{"job": 1}]\n')
    [summary] = snapshot_all(root, "u1")
    return Path(summary["path"])


def test_a_lost_file_comes_back_with_its_mode_and_what_the_snapshot_lacks_is_kept(root: Path, snapped: Path):
    (root / ".env").unlink()
    (root / "cron" / "jobs.json").write_text("[]\n")
    (root / "auth.json").write_text('{"made": "since"}\n')  # of the set, but not in the snapshot
    done = restore_snapshot(root, "default")
    assert sorted(done["restored"]) == [".env", "cron/jobs.json"]
    assert done["unchanged"] == ["config.yaml"] and done["update_id"] == "u1"
    assert (root / ".env").read_text() == "TOKEN=x\n" and os.stat(root / ".env").st_mode & 0o777 == 0o600
    assert (root / "cron" / "jobs.json").read_text() == '[{"job": 1}]\n'
    assert (root / "auth.json").read_text() == '{"made": "since"}\n'
    assert "auth.json" in done["not_in_snapshot"]
    [listed] = list_snapshots(root, "default")
    assert (listed["update_id"], listed["complete"], listed["files"]) == ("u1", True, 3)


def _tamper(snapped: Path, change) -> None:
    manifest = json.loads((snapped / MANIFEST).read_text())
    change(manifest)
    (snapped / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "path",
    ["../outside", "/etc/passwd", "notes.txt", "skins", "cron/../../x", "skins/../config.yaml"],
)
def test_a_manifest_naming_a_path_outside_the_set_refuses_the_whole_restore(root: Path, snapped: Path, path: str):
    (root / ".env").unlink()
    _tamper(snapped, lambda m: m["files"].append({"path": path, "bytes": 1, "sha256": "0" * 64}))
    with pytest.raises(SnapshotUnusable, match="outside the snapshot set"):
        restore_snapshot(root, "default")
    assert not (root / ".env").exists()  # nothing was written


def test_a_snapshot_missing_a_file_or_holding_a_symlink_or_other_bytes_is_refused(root: Path, snapped: Path):
    (snapped / "config.yaml").unlink()
    with pytest.raises(SnapshotUnusable, match="incomplete"):
        restore_snapshot(root, "default")
    (snapped / "config.yaml").symlink_to("/etc/hostname")
    with pytest.raises(SnapshotUnusable, match="symlink"):
        restore_snapshot(root, "default")
    (snapped / "config.yaml").unlink()
    (snapped / "config.yaml").write_text("model: tampered\n")
    with pytest.raises(SnapshotUnusable, match="corrupt"):
        restore_snapshot(root, "default")
    (snapped / MANIFEST).unlink()
    with pytest.raises(SnapshotUnusable, match="no manifest"):
        restore_snapshot(root, "default")
    assert list_snapshots(root)[0]["complete"] is False
    assert (root / "config.yaml").read_text() == "model: a\n"


def test_no_snapshot_of_that_update_and_a_home_dir_that_is_a_symlink_are_refused(
    root: Path, snapped: Path, tmp_path: Path
):
    with pytest.raises(SnapshotUnusable, match="no snapshot of update u9"):
        restore_snapshot(root, "default", "u9")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.rename(root / "cron", tmp_path / "cron-was")
    (root / "cron").symlink_to(outside)
    with pytest.raises(SnapshotUnusable, match="not a directory of the home"):
        restore_snapshot(root, "default", "u1")
    assert list(outside.iterdir()) == []
