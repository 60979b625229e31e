"""The container tier's private podman finds what a run killed before its cleanup left, and
removes exactly that: never a directory that is not provably its own."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from shared import identity
from tests.support import podman_sandbox as sandbox

# A pid that no longer runs with this start time: the identity of this process, one tick off.
_GONE = identity.current_identity()._replace(start_time=identity.current_identity().start_time + 1).to_dict()


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for ``/var/lib`` and for the cgroup root, with one cgroup there before."""
    var_lib, cgroups = tmp_path / "var-lib", tmp_path / "cgroup"
    var_lib.mkdir()
    (cgroups / "memory" / "libpod_parent").mkdir(parents=True)
    return var_lib / "containers", cgroups


def _claim(state_dir: Path, work: Path, had: set[str], owner: dict[str, int]) -> None:
    sandbox.claim_state_dir(state_dir, work, had)
    record = json.loads((state_dir / sandbox.RECORD).read_text())
    (state_dir / sandbox.RECORD).write_text(json.dumps({**record, "owner": owner}))


def _killed_run(state_dir: Path, cgroups: Path, owner: dict[str, int] | None = None) -> Path:
    """What a run killed mid-tier leaves: its record, podman's cache, its work dir, new cgroups."""
    work = Path(tempfile.mkdtemp(prefix=sandbox.WORK_PREFIX))
    (work / "storage").mkdir()
    had = set(sandbox._podman_cgroups(cgroups).splitlines())
    _claim(state_dir, work, had, owner or _GONE)
    (state_dir / "cache").mkdir()
    (state_dir / "cache" / "blob-info-cache-v1.boltdb").write_bytes(b"\0" * 16)
    (cgroups / "pids" / "libpod_parent" / "conmon").mkdir(parents=True)
    return work


def test_a_killed_runs_leftovers_are_removed_and_the_cgroups_found_before_are_kept(host):
    state_dir, cgroups = host
    work = _killed_run(state_dir, cgroups)

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is True

    assert not state_dir.exists() and not work.exists()
    assert not (cgroups / "pids" / "libpod_parent").exists()
    assert (cgroups / "memory" / "libpod_parent").is_dir()
    assert list(state_dir.parent.iterdir()) == []


def test_the_state_of_a_run_still_going_is_left_alone(host):
    state_dir, cgroups = host
    work = _killed_run(state_dir, cgroups, owner=identity.current_identity().to_dict())

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is False

    assert (state_dir / sandbox.RECORD).is_file() and work.is_dir()
    assert (cgroups / "pids" / "libpod_parent" / "conmon").is_dir()
    shutil.rmtree(work)


def test_a_directory_without_the_record_is_someone_elses_and_is_left_alone(host):
    state_dir, cgroups = host
    (state_dir / "cache").mkdir(parents=True)

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is False

    assert (state_dir / "cache").is_dir()


@pytest.mark.parametrize("extra", ["storage/overlay", "cache/other.db"])
def test_anything_podmans_private_run_does_not_write_makes_it_someone_elses(host, extra):
    state_dir, cgroups = host
    work = _killed_run(state_dir, cgroups)
    (state_dir / extra).parent.mkdir(parents=True, exist_ok=True)
    (state_dir / extra).write_text("x")

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is False

    assert (state_dir / extra).is_file() and work.is_dir()
    shutil.rmtree(work)


def test_a_record_naming_a_path_outside_the_sandboxs_work_dirs_deletes_nothing_there(host, tmp_path):
    state_dir, cgroups = host
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("x")
    _claim(state_dir, precious, set(), _GONE)

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is True

    assert (precious / "keep").is_file()
    assert not state_dir.exists()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps(["a list"]),
        json.dumps({"work": 1, "cgroups": []}),
        json.dumps({"work": "/tmp/x", "cgroups": []}),
    ],
)
def test_a_record_that_does_not_parse_is_not_ours(host, text):
    state_dir, cgroups = host
    state_dir.mkdir()
    (state_dir / sandbox.RECORD).write_text(text)

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is False

    assert (state_dir / sandbox.RECORD).is_file()


def test_a_claim_killed_before_its_rename_leaves_a_draft_the_next_run_removes(host):
    state_dir, cgroups = host
    draft = state_dir.parent / ".hm-claim-abc"
    draft.mkdir()
    (draft / sandbox.RECORD).write_text("{}")

    assert sandbox.recover_interrupted_run(state_dir, cgroups) is False

    assert not draft.exists()
