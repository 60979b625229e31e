"""The package registry against real processes: kill -9 at each step of an install, and a lock
held by another process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_package.registry import CATALOG_STATE, RECORD, Registry, RegistryBusy
from shared.spawn import first_line
from tests.support.processes import ROOT, python_env
from tests.support.registry_packages import PACKAGE_ID, digest, install, root_of

DRIVER = "tests.support.registry_driver"


def start(*args: str, pause_at: str | None = None) -> subprocess.Popen:
    env = python_env(**({"HERMES_FAULT_PAUSE_AT": pause_at} if pause_at else {}))
    return subprocess.Popen(
        [sys.executable, "-m", DRIVER, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A registry holding package 1 (selected) and catalog state (5, {key-1})."""
    registry = Registry.at(tmp_path / "state", create=True)
    install(registry, 1, version="1.0.0", catalog_state=(5, frozenset({"key-1"})))
    return tmp_path / "state"


@pytest.mark.parametrize("step", ["registry:staged", "registry:published"])
def test_a_kill_before_the_record_commits_records_nothing(state, step):
    registry = Registry.at(state, create=False)
    before = ((registry.root / RECORD).read_bytes(), (registry.root / CATALOG_STATE).read_bytes())
    proc = start("install", str(state), "2", "9", pause_at=step)
    try:
        assert first_line(proc, 30) == f"paused {step}"
    finally:
        kill(proc)
    assert ((registry.root / RECORD).read_bytes(), (registry.root / CATALOG_STATE).read_bytes()) == before
    assert registry.read().by_digest(digest(2)) is None
    report = registry.doctor()
    assert report["ok"] is True
    if step == "registry:staged":
        assert len(report["residue"]) == 1 and report["residue"][0].startswith(".staging-")
        assert not root_of(registry, 2).exists()
    else:
        # Published but never recorded: a complete root the record does not name.
        assert report["orphans"] == [digest(2).removeprefix("sha256:")]
    # The next mutation collects the residue; installing the same package adopts the orphan.
    install(registry, 2, version="2.0.0", catalog_state=(9, frozenset({"key-2"})))
    assert registry.doctor()["residue"] == []
    assert registry.verify_root(digest(2)).digest == digest(2)
    assert registry.catalog_state() == (9, frozenset({"key-1", "key-2"}))


def test_a_kill_after_the_record_commits_keeps_the_package_and_the_old_catalog_state(state):
    registry = Registry.at(state, create=False)
    catalog_before = (registry.root / CATALOG_STATE).read_bytes()
    proc = start("install", str(state), "2", "9", pause_at="registry:recorded")
    try:
        assert first_line(proc, 30) == "paused registry:recorded"
    finally:
        kill(proc)
    record = registry.read()
    assert record.generation == 2
    assert record.by_digest(digest(2)) is not None
    assert record.selected == {PACKAGE_ID: digest(1)}
    assert registry.verify_root(digest(2)).digest == digest(2)
    # The catalog state is written only after the commit, so the kill left the old one.
    assert (registry.root / CATALOG_STATE).read_bytes() == catalog_before
    assert registry.doctor() == {
        "ok": True,
        "record": {"readable": True},
        "roots": [{"digest": digest(1), "ok": True}, {"digest": digest(2), "ok": True}],
        "orphans": [],
        "residue": [],
    }


def test_an_uninterrupted_driver_installs(state):
    proc = start("install", str(state), "3", "7")
    try:
        assert first_line(proc, 30) == "installed"
        assert proc.wait(timeout=30) == 0
    finally:
        kill(proc)
    assert Registry.at(state, create=False).catalog_state() == (7, frozenset({"key-1", "key-3"}))


def test_a_lock_held_by_another_process_is_busy_at_once(state):
    registry = Registry.at(state, create=False)
    record = (registry.root / RECORD).read_bytes()
    proc = start("hold", str(state))
    try:
        assert first_line(proc, 30) == "ready"
        with pytest.raises(RegistryBusy):
            install(registry, 2, version="2.0.0")
        with pytest.raises(RegistryBusy):
            registry.uninstall(PACKAGE_ID)
        assert (registry.root / RECORD).read_bytes() == record
        assert registry.read().generation == 1  # reads need no lock
    finally:
        kill(proc)
    assert registry.uninstall(PACKAGE_ID).digest == digest(1)
