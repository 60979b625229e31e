"""State files across real processes: a lock held by another process, concurrent
read-modify-write, and readers that never see a torn file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from shared.files import (
    LockTimeout,
    locked,
    read_json,
    write_json_atomic,
)
from tests.support.atomic_writes import temp_leftovers
from tests.support.processes import ROOT


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.stderr.read()


def test_locked_times_out_against_another_process(tmp_path):
    path = tmp_path / "state.json"
    holder = _python(
        """
        import sys, time
        from shared.files import locked
        with locked(sys.argv[1]):
            print("ready", flush=True)
            time.sleep(30)
        """,
        str(path),
    )
    try:
        _wait_ready(holder)
        start = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            with locked(path, timeout=0.3):
                pass
        assert time.monotonic() - start >= 0.3  # it waited its whole timeout before it gave up
        assert info.value.code == "lock_timeout"
        assert info.value.path == tmp_path / "state.json.lock"
    finally:
        holder.kill()
        holder.wait()
    # The kernel dropped the dead holder's lock.
    with locked(path, timeout=1.0):
        pass


@pytest.mark.slow
def test_concurrent_update_json_from_many_processes(tmp_path):
    path = tmp_path / "counter.json"
    workers, increments = 8, 25
    code = """
        import sys
        from shared.files import update_json
        def bump(d):
            d["n"] += 1
            return d
        for _ in range(int(sys.argv[2])):
            update_json(sys.argv[1], bump, default={"n": 0}, timeout=30)
    """
    procs = [_python(code, str(path), str(increments)) for _ in range(workers)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert read_json(path) == {"n": workers * increments}
    assert temp_leftovers(tmp_path) == []


@pytest.mark.slow
def test_reader_never_sees_a_torn_file(tmp_path):
    path = tmp_path / "big.json"
    write_json_atomic(path, {"generation": -1, "rows": []})
    writer = _python(
        """
        import sys
        from shared.files import write_json_atomic
        rows = [{"id": i, "text": "x" * 200} for i in range(2000)]  # ~450 KB
        generation = 0
        while True:
            write_json_atomic(sys.argv[1], {"generation": generation, "rows": rows})
            if generation == 0:
                print("ready", flush=True)
            generation += 1
        """,
        str(path),
    )
    try:
        _wait_ready(writer)
        generations = set()
        reads = 0
        # At least 600 reads, and on until they have spanned several rewrites (bounded by count).
        while reads < 600 or (len(generations) < 5 and reads < 50_000):
            data = read_json(path)  # a StateFileCorrupt here fails the test
            assert len(data["rows"]) == 2000
            generations.add(data["generation"])
            reads += 1
        assert writer.poll() is None, writer.stderr.read()
        assert len(generations) >= 5, "the writer hardly replaced the file while we read"
    finally:
        writer.kill()
        writer.wait()
