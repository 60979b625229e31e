"""Pre-update snapshots: the same set for every profile, all or nothing, keep=1, and the full archive."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
from pathlib import Path

import pytest

from nous.guest_handoff.records import records_path
from nous.store import store_path
from services.updater.snapshot import (
    KEEP,
    MANIFEST,
    MAX_FILE_BYTES,
    SNAPSHOT_SET,
    SNAPSHOTS_DIR,
    SnapshotFailed,
    full_backup,
    snapshot_all,
)
from shared import homes

PROFILES = ("default", "coder", "ops")


def home_of(root: Path, profile: str) -> Path:
    return root if profile == "default" else root / "profiles" / profile


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.fixture(autouse=True)
def snapshot_set(root: Path) -> None:
    """Three profiles, each with a different subset of the snapshot set present."""
    write(root / "config.yaml", "model: a\n")
    write(root / ".env", "TOKEN=secret-default\n", 0o600)
    write(root / "auth.json", '{"token": "x"}\n', 0o600)
    write(root / "cron" / "jobs.json", "[]\n")
    write(root / "skins" / "dark" / "theme.yaml", "bg: black\n")
    write(root / "skins" / "light.yaml", "bg: white\n")
    write(root / "notes.txt", "not in the set\n")
    # The shared account store and the handoff records, where their own modules put them.
    write(store_path(root), '{"refresh": "y"}\n', 0o600)
    write(records_path(root), '{"records": {}}\n', 0o600)

    coder = root / "profiles" / "coder"
    write(coder / "config.json", "{}\n")
    write(coder / "auth.json", '{"provider": "nous"}\n', 0o600)
    write(coder / "gateway_state.json", "{}\n")

    ops = root / "profiles" / "ops"
    ops.mkdir(parents=True)  # nothing of the set at all


def manifests(root: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for profile in PROFILES:
        base = home_of(root, profile) / SNAPSHOTS_DIR
        names = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
        out[profile] = [json.loads((base / n / MANIFEST).read_text()) | {"dir": n} for n in names]
    return out


def covered(manifest: dict, member: str) -> bool:
    paths = [f["path"] for f in manifest["files"]]
    if member.endswith("/"):
        return any(p.startswith(member) for p in paths) or member.rstrip("/") in manifest["missing"]
    return member in paths or member in manifest["missing"]


def test_every_profile_gets_the_identical_set(root):
    summaries = snapshot_all(root, "u1")
    assert [s["profile"] for s in summaries] == list(PROFILES)
    found = manifests(root)
    for profile in PROFILES:
        [manifest] = found[profile]
        assert manifest["set"] == list(SNAPSHOT_SET)
        assert (manifest["update_id"], manifest["profile"]) == ("u1", profile)
        # Every member is accounted for, as copied or as missing; nothing outside the set is taken.
        assert all(covered(manifest, m) for m in SNAPSHOT_SET), manifest
        assert all(any(f["path"].startswith(m) for m in SNAPSHOT_SET) for f in manifest["files"])

    by_profile = {s["profile"]: s for s in summaries}
    assert by_profile["ops"]["files"] == 0
    assert sorted(by_profile["ops"]["missing"]) == sorted(m.rstrip("/") for m in SNAPSHOT_SET)
    assert by_profile["default"]["files"] == 8
    copied = [f["path"] for f in found["default"][0]["files"]]
    for state in (store_path(root), records_path(root)):
        assert state.relative_to(root).as_posix() in copied
    assert "skins/dark/theme.yaml" in [f["path"] for f in found["default"][0]["files"]]


def test_copies_are_exact_with_modes_and_hashes(root):
    [summary, *_] = snapshot_all(root, "u1")
    snap = Path(summary["path"])
    assert stat.S_IMODE(snap.stat().st_mode) == 0o700
    manifest = json.loads((snap / MANIFEST).read_text())
    for entry in manifest["files"]:
        original, copy = root / entry["path"], snap / entry["path"]
        assert copy.read_bytes() == original.read_bytes()
        assert entry["sha256"] == hashlib.sha256(original.read_bytes()).hexdigest()
        assert entry["bytes"] == original.stat().st_size
        assert stat.S_IMODE(copy.stat().st_mode) == stat.S_IMODE(original.stat().st_mode)
    assert stat.S_IMODE((snap / ".env").stat().st_mode) == 0o600
    assert stat.S_IMODE((snap / store_path(root).relative_to(root)).stat().st_mode) == 0o600
    assert stat.S_IMODE((snap / "auth.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((snap / "config.yaml").stat().st_mode) == 0o644
    coder = Path(next(s for s in snapshot_all(root, "u2") if s["profile"] == "coder")["path"])
    assert stat.S_IMODE((coder / "auth.json").stat().st_mode) == 0o600


def test_keep_one_after_two_snapshots(root):
    first = snapshot_all(root, "u1")
    second = snapshot_all(root, "u2")
    assert KEEP == 1
    for old, new in zip(first, second, strict=True):
        base = Path(new["path"]).parent
        assert [p.name for p in base.iterdir()] == [Path(new["path"]).name]
        assert new["pruned"] == [Path(old["path"]).name]


def test_leftover_temp_dirs_are_pruned(root):
    stale = root / SNAPSHOTS_DIR / ".tmp-20200101_000000_dead.abc"
    stale.mkdir(parents=True)
    snapshot_all(root, "u1")
    assert not stale.exists()


def test_a_file_over_the_cap_is_skipped_and_listed(root):
    big = root / "profiles" / "coder" / "gateway_starts.json"
    with open(big, "wb") as f:  # sparse: takes no disk
        os.truncate(f.fileno(), MAX_FILE_BYTES + 1)
    summaries = {s["profile"]: s for s in snapshot_all(root, "u1")}
    coder = summaries["coder"]
    assert coder["skipped_large"] == [{"path": "gateway_starts.json", "bytes": MAX_FILE_BYTES + 1}]
    assert not (Path(coder["path"]) / "gateway_starts.json").exists()
    manifest = json.loads((Path(coder["path"]) / MANIFEST).read_text())
    assert manifest["skipped_large"] == coder["skipped_large"]


def test_a_fifo_is_skipped_not_waited_on(root):
    os.mkfifo(root / "profiles" / "ops" / "auth.json")
    ops = next(s for s in snapshot_all(root, "u1") if s["profile"] == "ops")
    assert ops["skipped_special"] == ["auth.json"]


def test_all_or_nothing_when_one_profile_cannot_be_snapshotted(root):
    previous = {s["profile"]: Path(s["path"]) for s in snapshot_all(root, "u1")}
    # A file where the snapshot dir belongs: creating the snapshot fails even for root.
    blocked = root / "profiles" / "ops" / SNAPSHOTS_DIR
    shutil.rmtree(blocked)
    blocked.write_text("in the way\n")

    with pytest.raises(SnapshotFailed) as info:
        snapshot_all(root, "u2")
    assert info.value.code == "snapshot_failed"
    assert info.value.profile == "ops"
    assert info.value.detail["profile"] == "ops"

    for profile in ("default", "coder"):
        base = home_of(root, profile) / SNAPSHOTS_DIR
        # The old snapshot was kept (nothing pruned) and no new one is left behind.
        assert [p.name for p in base.iterdir()] == [previous[profile].name]
    assert blocked.read_text() == "in the way\n"


def test_update_id_must_be_a_file_name(root):
    with pytest.raises(ValueError):
        snapshot_all(root, "../escape")


def test_full_backup_archives_the_root_but_runtime_dirs(root):
    snapshot_all(root, "u0")
    for home in (root, root / "profiles" / "coder"):
        write(homes.ensure_run_dir(home) / "gateway.lock", "")  # private, as a service makes it
        write(home / "logs" / "gateway.log", "log\n")
    write(root / "mesh" / "supervisord.conf", "[supervisord]\n")
    write(root / "backups" / "update_old.tar.gz", "old\n")
    write(root / "skins" / "logs" / "kept.yaml", "a skin dir named logs is not a home's logs\n")

    result = full_backup(root, "u1")
    archive = Path(result["path"])
    assert archive == root / "backups" / "update_u1.tar.gz"
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert result["bytes"] == archive.stat().st_size
    assert result["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert [p.name for p in archive.parent.iterdir() if p.name.endswith(".tmp")] == []

    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        env = tar.getmember(".env")
        assert tar.extractfile("shared/nous_auth.json").read() == b'{"refresh": "y"}\n'
    assert {
        "config.yaml",
        ".env",
        "auth.json",
        "cron/jobs.json",
        "notes.txt",
        "skins/dark/theme.yaml",
        "skins/logs/kept.yaml",
        "profiles/coder/config.json",
        "profiles/coder/auth.json",
        "shared/nous_auth.json",
        "profiles/ops",
    } <= names
    assert stat.S_IMODE(env.mode) == 0o600
    excluded = ("run", "logs", "state-snapshots", "backups", "mesh")
    for name in names:
        parts = Path(name).parts
        home_level = parts[2:3] if parts[:1] == ("profiles",) else parts[:1]
        assert not set(home_level) & set(excluded), name
