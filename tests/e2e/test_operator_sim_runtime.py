"""The simulator's PTY runtime with real children: input, resize, stop, exit statuses, a flood,
raw bytes, spawn failures, fds, the root pid and the hang-up."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from simulators.operator_sim.runtime import InputStalled, Runtime, SpawnFailed

WAIT = 20.0  # a bound for a step that happens, never a speed expectation


class Watch:
    """What a runtime printed, and its end."""

    def __init__(self) -> None:
        self.output = bytearray()
        self.status: int | None = None
        self.done = trio.Event()
        self._changed = trio.Event()

    def on_output(self, data: bytes) -> None:
        assert len(data) <= 64 * 1024
        self.output += data
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, marker: bytes) -> None:
        with trio.fail_after(WAIT):
            while marker not in self.output:
                await self._changed.wait()

    async def finished(self) -> int:
        with trio.fail_after(WAIT):
            await self.done.wait()
        assert self.status is not None
        return self.status


@asynccontextmanager
async def started(
    tmp_path: Path, source: str, *, cols: int = 80, rows: int = 24
) -> AsyncIterator[tuple[Runtime, Watch]]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(source))
    runtime = await Runtime.spawn([sys.executable, str(script)], dict(os.environ), str(tmp_path), cols, rows)
    watch = Watch()

    async def pump() -> None:
        watch.status = await runtime.pump(watch.on_output)
        watch.done.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            yield runtime, watch
            with trio.move_on_after(WAIT):
                await watch.done.wait()
            nursery.cancel_scope.cancel()  # a child still running is killed and reaped by the pump
    finally:
        runtime.close()


async def test_input_reaches_the_child_exactly_once(tmp_path):
    got = tmp_path / "got"
    source = f"""
        import sys
        print("ready", flush=True)
        with open({str(got)!r}, "a") as out:
            for line in sys.stdin:
                out.write(line)
                out.flush()
                if line == "end\\n":
                    break
    """
    async with started(tmp_path, source) as (runtime, watch):
        await watch.until(b"ready")
        await runtime.write(b"hello\n")
        await runtime.write(b"end\n")
        assert await watch.finished() == 0
    assert got.read_text() == "hello\nend\n"


async def test_a_resize_delivers_sigwinch_with_the_new_size(tmp_path):
    source = """
        import os, signal, time
        def report(*_):
            size = os.get_terminal_size(0)
            print(f"size {size.columns}x{size.lines}", flush=True)
        signal.signal(signal.SIGWINCH, report)
        report()
        time.sleep(60)
    """
    async with started(tmp_path, source, cols=80, rows=24) as (runtime, watch):
        await watch.until(b"size 80x24")
        runtime.resize(132, 40)
        await watch.until(b"size 132x40")
        await runtime.stop(grace=5)
        assert await watch.finished() == -signal.SIGTERM


async def test_a_child_ignoring_sigterm_ends_by_sigkill_after_the_grace(tmp_path):
    source = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        while True:
            time.sleep(1)
    """
    async with started(tmp_path, source) as (runtime, watch):
        await watch.until(b"ready")
        await runtime.stop(grace=0.5)
        assert await watch.finished() == -signal.SIGKILL


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("raise SystemExit(0)", 0),
        ("raise SystemExit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)", -signal.SIGUSR1),
    ],
)
async def test_exit_statuses(tmp_path, body, status):
    async with started(tmp_path, body) as (_, watch):
        assert await watch.finished() == status


async def test_a_five_mib_flood_is_read_completely(tmp_path):
    size = 5 * 1024 * 1024
    source = f"""
        import os
        data = b"x" * {size}
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]
    """
    async with started(tmp_path, source) as (_, watch):
        assert await watch.finished() == 0
    assert len(watch.output) == size
    assert set(watch.output) == {ord("x")}


async def test_invalid_utf8_arrives_as_the_same_bytes(tmp_path):
    raw = b"<\xff\xfe\x80\xc3(ok\xe2\x82>"
    source = f"""
        import os
        os.write(1, {raw!r})
    """
    async with started(tmp_path, source) as (_, watch):
        assert await watch.finished() == 0
    assert bytes(watch.output) == raw


async def test_input_a_child_never_reads_stalls_with_a_typed_error(tmp_path):
    source = """
        import sys, time, tty
        tty.setraw(0)  # raw mode: a full input buffer holds the writer back instead of dropping
        print("ready", flush=True)
        time.sleep(60)
    """
    async with started(tmp_path, source) as (runtime, watch):
        await watch.until(b"ready")
        with pytest.raises(InputStalled) as caught:
            await runtime.write(b"y" * (4 * 1024 * 1024), timeout=0.5)
        assert caught.value.code == "runtime_input_stalled"
        assert 0 < caught.value.detail["written"] < 4 * 1024 * 1024
        await runtime.stop(grace=5)
        await watch.finished()


@pytest.mark.parametrize("case", ["missing", "not_executable", "bad_cwd", "empty"])
async def test_a_program_that_cannot_start_is_spawn_failed(tmp_path, case):
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program")
    argv, cwd = {
        "missing": (["no-such-program-anywhere"], str(tmp_path)),
        "not_executable": ([str(plain)], str(tmp_path)),
        "bad_cwd": ([sys.executable, "-c", "pass"], str(tmp_path / "gone")),
        "empty": ([], str(tmp_path)),
    }[case]
    before = _open_fds()
    with pytest.raises(SpawnFailed) as caught:
        await Runtime.spawn(argv, dict(os.environ), cwd, 80, 24)
    assert caught.value.code == "runtime_spawn_failed"
    assert caught.value.detail["reason"]
    assert _open_fds() == before


async def test_twenty_spawns_leak_no_fd(tmp_path):
    async def once() -> None:
        runtime = await Runtime.spawn([sys.executable, "-c", "print('hi')"], dict(os.environ), str(tmp_path), 80, 24)
        try:
            assert await runtime.pump(lambda _: None) == 0
        finally:
            runtime.close()

    await once()  # trio's own lazily made fds (its wakeup pipe) are not ours to count
    before = _open_fds()
    for _ in range(20):
        await once()
    assert _open_fds() == before


async def test_the_child_is_the_pty_root_it_is_told_of(tmp_path):
    source = """
        import os
        print(f"pid={os.getpid()} root={os.environ['POHUNEK_PTY_ROOT_PID']} "
              f"sid={os.getsid(0)} fg={os.tcgetpgrp(0)} tty={os.ttyname(0) == os.ttyname(1)}", flush=True)
    """
    async with started(tmp_path, source) as (runtime, watch):
        assert await watch.finished() == 0
    pid = runtime.pid
    assert f"pid={pid} root={pid} sid={pid} fg={pid} tty=True".encode() in watch.output


async def test_closing_the_master_hangs_the_child_up(tmp_path):
    hup = tmp_path / "hup"
    source = f"""
        import os, signal, time
        def hung_up(*_):
            open({str(hup)!r}, "w").write("hup")
            os._exit(7)
        signal.signal(signal.SIGHUP, hung_up)
        print("ready", flush=True)
        time.sleep(60)
    """
    async with started(tmp_path, source) as (runtime, watch):
        await watch.until(b"ready")
        runtime.close()
        runtime.close()  # idempotent
        assert await watch.finished() == 7
    assert hup.read_text() == "hup"


async def test_a_cancelled_pump_kills_and_reaps_the_child(tmp_path):
    runtime = await Runtime.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), str(tmp_path), 80, 24
    )
    try:
        with trio.move_on_after(0.2):
            await runtime.pump(lambda _: None)
    finally:
        runtime.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(runtime.pid, os.WNOHANG)  # already reaped: no zombie left behind
    with pytest.raises(ProcessLookupError):
        os.kill(runtime.pid, 0)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))
