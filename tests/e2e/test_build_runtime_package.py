"""``scripts/build_runtime_package.py`` as a real process: it builds the Hermes runtime package
reproducibly, writes the archive the reader accepts, and fails in one line with status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_package.archive import digest, read
from runtime_package.archive_dir import entries_from_dir
from tests.support.processes import ROOT, python_env

SCRIPT = ROOT / "scripts" / "build_runtime_package.py"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=120,
    )


@pytest.fixture
def hermes_package(tmp_path: Path) -> Path:
    """A clean copy of ``runtime-packages/hermes`` (a dev tree may hold byte-code caches)."""
    copy = tmp_path / "hermes"
    shutil.copytree(ROOT / "runtime-packages" / "hermes", copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def test_it_writes_the_archive_and_prints_its_digest(hermes_package, tmp_path):
    out = tmp_path / "hermes.tar.zst"
    done = run(hermes_package, "-o", out)
    assert (done.returncode, done.stderr) == (0, "")
    archive = out.read_bytes()
    assert done.stdout == digest(archive) + "\n"
    entries = read(archive, digest(archive))
    assert {e.path for e in entries} == {e.path for e in entries_from_dir(hermes_package)}
    assert "runtime.toml" in {e.path for e in entries}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_two_runs_on_two_copies_give_the_same_bytes(hermes_package, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(hermes_package, other)
    os.utime(other / "runtime.toml", (1, 1))  # metadata the archive must not carry
    first, second = tmp_path / "a.tar.zst", tmp_path / "b.tar.zst"
    assert run(hermes_package, "-o", first).returncode == 0
    assert run(other, "-o", second).returncode == 0
    assert first.read_bytes() == second.read_bytes()


def test_verify_builds_twice_and_prints_the_digest(hermes_package, tmp_path):
    out = tmp_path / "hermes.tar.zst"
    assert run(hermes_package, "-o", out).returncode == 0
    done = run(hermes_package, "--verify")
    assert (done.returncode, done.stdout) == (0, digest(out.read_bytes()) + "\n")


def test_json_reports_digest_path_files_and_bytes(hermes_package, tmp_path):
    out = tmp_path / "hermes.tar.zst"
    done = run(hermes_package, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    archive = out.read_bytes()
    assert report == {
        "digest": digest(archive),
        "path": str(out),
        "files": len(read(archive)),
        "bytes": len(archive),
    }


def test_an_execute_bit_makes_the_entry_executable(tmp_path):
    package = tmp_path / "other-runtime"  # the Hermes package's contract admits no extra file
    package.mkdir()
    (package / "README").write_text("another runtime\n")
    (package / "run.sh").write_bytes(b"#!/bin/sh\n")
    (package / "run.sh").chmod(0o700)
    out = tmp_path / "other.tar.zst"
    assert run(package, "-o", out).returncode == 0
    executable = {e.path for e in read(out.read_bytes()) if e.executable}
    assert executable == {"run.sh"}


def _symlink(root: Path) -> None:
    (root / "link").symlink_to("runtime.toml")


def _pycache(root: Path) -> None:
    (root / "operator" / "__pycache__").mkdir()
    (root / "operator" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")


def _pyc(root: Path) -> None:
    (root / "stale.pyc").write_bytes(b"\0")


def _bad_name(root: Path) -> None:
    (root / "a file").write_bytes(b"x")


def _fifo(root: Path) -> None:
    os.mkfifo(root / "pipe")


def _empty_dir(root: Path) -> None:
    (root / "empty").mkdir()


@pytest.mark.parametrize(
    "spoil, problem",
    [
        (_symlink, "is a symlink"),
        (_pycache, "byte-code cache"),
        (_pyc, "byte-code cache"),
        (_bad_name, "path rules"),
        (_fifo, "not a regular file"),
        (_empty_dir, "empty directory"),
    ],
    ids=["symlink", "pycache", "pyc", "bad-name", "fifo", "empty-dir"],
)
def test_an_unclean_package_fails_in_one_line_and_writes_nothing(hermes_package, tmp_path, spoil, problem):
    spoil(hermes_package)
    out = tmp_path / "hermes.tar.zst"
    done = run(hermes_package, "-o", out)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("build_runtime_package: ") and done.stderr.count("\n") == 1
    assert problem in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [("{pkg}",), ("{tmp}/missing", "-o", "{tmp}/x"), ("{pkg}", "-o", "{tmp}/no/such/dir/x"), ("--bogus",)],
    ids=["no-output", "missing-dir", "unwritable-output", "bad-option"],
)
def test_a_usage_or_io_failure_is_one_line_and_status_2(hermes_package, tmp_path, args):
    done = run(*(a.format(pkg=hermes_package, tmp=tmp_path) for a in args))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("build_runtime_package: ") and done.stderr.count("\n") == 1


def test_the_hermes_package_builds_only_while_its_payload_matches_operator_toml(hermes_package, tmp_path):
    tools = hermes_package / "operator" / "pohunek" / "tools.py"
    tools.write_bytes(tools.read_bytes() + b"# edited\n")
    out = tmp_path / "hermes.tar.zst"
    refused = run(hermes_package, "-o", out)
    assert refused.returncode == 2 and "operator.toml" in refused.stderr and not out.exists()
    refreshed = run(hermes_package, "--refresh-operator-manifest", "-o", out)
    assert refreshed.returncode == 0 and out.exists()
    assert tools.read_bytes().endswith(b"# edited\n")
