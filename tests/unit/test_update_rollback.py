"""The rollback's rules: which update it undoes, when its archive is refused, and what the
restore of the root home puts back (only safe members, never what runs now owns)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from services.updater import obligations
from services.updater.home_restore import restore_home
from services.updater.rollback import ArchiveUnusable, UnknownUpdate, check_archive, choose, moved_from
from services.updater.snapshot import full_backup
from tests.support.updater import begin

OLD, NEW = "1" * 40, "2" * 40


def moved(update_id: str, before: str = OLD, *, rollback: bool = False):
    receipt = begin(update_id)
    receipt.set("plan", {"rollback": {"of": "x", "target": before} if rollback else None})
    receipt.step("moved", True, {"before": before, "after": NEW, "branch": "main"})
    return receipt


def up_to_date(update_id: str):
    receipt = begin(update_id)
    receipt.step("apply", True, {"before": NEW, "after": NEW, "moved": False})
    return receipt


def test_the_default_is_the_newest_update_that_moved_the_code_and_is_no_rollback():
    newest_first = [up_to_date("u4"), moved("u3", NEW, rollback=True), moved("u2"), moved("u1", "3" * 40)]
    chosen = choose(newest_first, None)
    assert chosen.update_id == "u2" and moved_from(chosen) == OLD


def test_an_update_named_is_taken_even_when_older_and_refused_when_unknown_or_unmoved():
    receipts = [moved("u2"), moved("u1", "3" * 40), up_to_date("u0")]
    assert choose(receipts, "u1").update_id == "u1"
    with pytest.raises(UnknownUpdate, match="no receipt of update u9"):
        choose(receipts, "u9")
    with pytest.raises(UnknownUpdate, match="did not move the code"):
        choose(receipts, "u0")
    with pytest.raises(UnknownUpdate):
        choose(receipts, "../etc")  # not an update id at all
    with pytest.raises(UnknownUpdate, match="nothing to roll back"):
        choose([up_to_date("u0")], None)


def test_an_archive_that_is_gone_or_not_the_one_recorded_is_refused(root: Path):
    (root / "config.yaml").write_text("model: a\n")
    backup = full_backup(root, "u1")
    check_archive(backup)  # as written
    path = Path(backup["path"])
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ArchiveUnusable, match="corrupt") as corrupt:
        check_archive(backup)
    assert corrupt.value.code == "rollback_archive_invalid"
    path.unlink()
    with pytest.raises(ArchiveUnusable, match="cannot be read"):
        check_archive(backup)


def test_the_restore_puts_the_archived_files_back_and_keeps_what_runs_now_and_what_it_lacks(root: Path):
    coder = root / "profiles" / "coder"
    coder.mkdir(parents=True)
    (root / "config.yaml").write_text("model: before\n")
    (coder / "auth.json").write_text('{"a": 1}\n')
    (coder / "gateway_state.json").write_text('{"pid": 1}\n')
    obligations.replace_fleet(root, {"coder": obligations.owed_part(OLD, "stale", "why", "u0")})
    backup = full_backup(root, "u1")

    (root / "config.yaml").write_text("model: after\n")
    (coder / "auth.json").unlink()
    (coder / "gateway_state.json").write_text('{"pid": 2}\n')
    (coder / "new-file").write_text("made since\n")
    obligations.replace_fleet(root, {})

    done = restore_home(root, backup, "r1")
    assert (root / "config.yaml").read_text() == "model: before\n"
    assert (coder / "auth.json").read_text() == '{"a": 1}\n'
    assert (coder / "gateway_state.json").read_text() == '{"pid": 2}\n'  # the running gateway's own
    assert (coder / "new-file").read_text() == "made since\n"  # not in the archive: kept
    assert obligations.read_fleet(root) == {}  # what is owed now is the updater's, not the archive's
    assert done["restored"] >= 2 and not (root / "backups" / ".restore-r1").exists()


def _archive(root: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> dict:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    (root / "backups").mkdir(exist_ok=True)
    path = root / "backups" / "update_u1.tar.gz"
    path.write_bytes(raw.getvalue())
    return {"path": str(path), "sha256": hashlib.sha256(raw.getvalue()).hexdigest()}


def test_members_that_would_leave_the_home_or_are_links_are_never_restored(root: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside)  # a directory of the home that is a symlink out of it

    def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = kind, link, 0o644
        return info

    backup = _archive(
        root,
        [
            (member("config.yaml"), b"model: good\n"),
            (member("../escaped"), b"x"),
            (member("/abs"), b"x"),
            (member("evil-link", tarfile.SYMTYPE, "/etc/passwd"), b""),
            (member("hard", tarfile.LNKTYPE, "config.yaml"), b""),
            (member("linked/through"), b"x"),
            (member("obligations/fleet-restart.json"), json.dumps({"schema": 1, "gateways": {}}).encode()),
        ],
    )
    done = restore_home(root, backup, "r1")
    assert (root / "config.yaml").read_text() == "model: good\n"
    assert not (root.parent / "escaped").exists() and not Path("/abs").exists()
    assert not (root / "evil-link").exists() and not (root / "hard").exists()
    assert list(outside.iterdir()) == []  # nothing went through the symlinked directory
    assert not (root / "obligations").exists()
    assert done["restored"] == 2 and (root / "abs").read_bytes() == b"x"  # an absolute name lands inside
    assert {"linked/through", "evil-link", "hard"} <= set(done["not_restored"])
