"""The operator session daemon simulator: what a call costs, against the cheapest call on the
same daemon, and what an input's round trip through a real PTY costs, against the same round
trip on a bare PTY.

Everything is measured in the same run on the same machine; only the ratios mean much.

- baseline call: ``host.list`` (no session is looked at);
- ``session.get``, ``session.output`` (a 4 KiB page from a cursor) and ``session.screen`` of a
  live ``hermes chat`` that has printed a screenful;
- input to echo: ``session.input`` of a line, then ``session.output`` from the cursor until the
  chat's answer is there, against a baseline of typing the same line, framed as the daemon
  frames it (a paste, then the submit after the runtime's delay), to the same ``hermes chat``
  on a bare PTY and reading it back directly.

    .venv/bin/python bench/session_daemon.py [--calls N] [--round-trips N]
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.operator import protocol as p  # noqa: E402
from shared.operator.client import DaemonClient  # noqa: E402
from simulators.operator_sim import agents  # noqa: E402

HOST = "local"
IDLE = "❯".encode()
# Targets, as ratios to the baselines measured in the same run.
TARGET_CALL_RATIO = 3.0  # a session read costs at most 3x the cheapest call
TARGET_ROUND_TRIP_RATIO = 3.0  # input to echo through the daemon at most 3x the chat on a bare PTY


def timed(call: Callable[[], object], n: int) -> list[int]:
    samples = []
    for _ in range(n):
        began = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - began)
    return sorted(samples)


def median(samples: list[int]) -> int:
    return samples[len(samples) // 2]


def bare_pty_round_trip(n: int, env: dict[str, str]) -> list[int]:
    """The same line typed to the same ``hermes chat`` on a bare PTY of our own, framed as the
    daemon frames it, read back directly: what the round trip costs without the daemon in between."""
    program = str(Path(sys.executable).parent / "hermes")
    agent, _ = agents.hermes(program)
    text, submit = agent.framed("round trip", submit=True)
    master, slave = os.openpty()
    chat = subprocess.Popen(
        [program, "chat"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env=env,
    )
    os.close(slave)

    def read_until(marker: bytes, count: int) -> None:
        seen = b""
        while seen.count(marker) < count:
            select.select([master], [], [], 5)
            seen += os.read(master, 65536)

    read_until(IDLE, 1)

    def once() -> None:
        os.write(master, text)
        if submit:  # written apart, as the daemon writes it
            time.sleep(agent.submit_delay)
            os.write(master, submit)
        read_until(b"round trip", 2)  # the chat's echo of the typing, then its answer

    try:
        return timed(once, n)
    finally:
        chat.kill()
        chat.wait()
        os.close(master)


def daemon_round_trip(client: DaemonClient, session: str, n: int) -> tuple[list[int], float]:
    """Each round trip and, on average, how many output calls it took: the cursor is kept
    from call to call, as a caller of the daemon keeps it."""
    target = {"host": HOST, "session": session}
    tail = client.call(p.SESSION_OUTPUT, {**target, "max_bytes": 1})
    cursor = tail["runtime_end_offset"]
    runtime = {k: tail[k] for k in ("worker_instance_id", "runtime_generation")}  # the cursor's runtime
    reads = 0

    def once() -> None:
        nonlocal cursor, reads
        client.call(p.SESSION_INPUT, {**target, "text": "round trip"})
        seen = b""
        while seen.count(b"round trip") < 2:  # the chat's echo of the typing, then its answer
            page = client.call(
                p.SESSION_OUTPUT, {**target, **runtime, "after_offset": cursor, "wait_ms": 2000, "max_bytes": 65536}
            )
            reads += 1
            seen += page["data"]
            cursor = page["next_offset"]

    samples = timed(once, n)
    return samples, reads / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--round-trips", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as directory:
        home = Path(directory) / "home"
        home.mkdir()
        address = f"ipc://{directory}/daemon.ctl"
        env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(ROOT)}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "simulators.operator_sim", address, "--work-dir", str(home)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert daemon.stdout is not None and daemon.stdout.readline().startswith(b"ready")
            with DaemonClient(address) as client:
                started = client.call(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": "bench"})
                sid = started["id"]
                client.call(p.SESSION_INPUT, {"host": HOST, "session": sid, "text": "/spam 40"})
                time.sleep(1.0)
                rows = [("host.list (baseline)", timed(lambda: client.call(p.HOST_LIST), args.calls))]
                target = {"host": HOST, "session": sid}
                rows.append(("session.get", timed(lambda: client.call(p.SESSION_GET, target), args.calls)))
                runtime = {k: started["runtime"][k] for k in ("worker_instance_id", "runtime_generation")}
                page = {**target, **runtime, "after_offset": "0", "max_bytes": 4096}
                rows.append(("session.output 4 KiB", timed(lambda: client.call(p.SESSION_OUTPUT, page), args.calls)))
                rows.append(("session.screen", timed(lambda: client.call(p.SESSION_SCREEN, target), args.calls)))
                bare = bare_pty_round_trip(args.round_trips, env)
                through, reads = daemon_round_trip(client, sid, args.round_trips)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    base = median(rows[0][1])
    print(f"{'call':<24}{'p50 µs':>10}{'p99 µs':>10}{'x baseline':>12}")
    for name, samples in rows:
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        print(f"{name:<24}{median(samples) / 1000:>10.0f}{p99 / 1000:>10.0f}{median(samples) / base:>12.2f}")
    ratio = median(through) / median(bare)
    print(
        f"input to echo: the chat on a bare PTY p50 {median(bare) / 1000:.0f} µs, through the daemon"
        f" {median(through) / 1000:.0f} µs ({reads:.1f} output calls each): {ratio:.1f}x"
    )
    worst = max(median(samples) / base for _, samples in rows[1:])
    ok = worst <= TARGET_CALL_RATIO and ratio <= TARGET_ROUND_TRIP_RATIO
    print(
        f"targets: reads <= {TARGET_CALL_RATIO}x baseline ({worst:.2f}x), round trip <= {TARGET_ROUND_TRIP_RATIO}x ({ratio:.1f}x): {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
