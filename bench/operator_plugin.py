"""The operator plugin: what a typed tool call costs against the bare daemon call it makes,
and how soon a wait through the plugin wakes after output arrives, against a bare wait.

Everything runs in the same run on the same machine; only the ratios mean much.

- ``pohunek_sessions`` against ``session.list``; ``pohunek_session_get`` (it resolves the
  reference with ``session.list``, then reads) against ``session.get``; both with a live
  ``hermes chat`` as the session;
- wake-up: a ``pohunek_session_wait`` for output past the cursor, then a line typed to the
  chat; the time from the input's sending to the wait's return, against the same with a bare
  ``session.wait``. The daemon answers the input only after its submit, written the runtime's
  delay after the paste whose echo wakes the wait, so the clock starts before the call.

    .venv/bin/python bench/operator_plugin.py [--calls N] [--wakes N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.session_daemon import median, timed  # noqa: E402
from shared.operator import protocol as p  # noqa: E402
from shared.operator.client import DaemonClient  # noqa: E402
from shared.operator.policy import Policy  # noqa: E402
from tests.support.operator_plugin import payload  # noqa: E402

HOST = "local"
TARGET_CALL_RATIO = 3.0  # a tool call costs at most 3x its bare daemon call (it makes one or two)
TARGET_WAKE_RATIO = 2.0  # a wait through the plugin wakes at most 2x as late as a bare wait


Cursor = dict[str, str]  # an output offset with the runtime it counts in


def _wait_then_note(
    wait: Callable[[Cursor], object], cursor: Cursor, returned: list[int], done: threading.Event
) -> None:
    wait(cursor)
    returned.append(time.perf_counter_ns())
    done.set()


def wake_ups(wait: Callable[[Cursor], object], client: DaemonClient, session: str, n: int) -> list[int]:
    """From the sending of an input to the return of a wait that was already waiting for output."""
    target = {"host": HOST, "session": session}
    samples = []
    for _ in range(n):
        page = client.call(p.SESSION_OUTPUT, {**target, "max_bytes": 1})
        cursor = {
            "worker_instance_id": page["worker_instance_id"],
            "runtime_generation": page["runtime_generation"],
            "after_output_offset": page["runtime_end_offset"],
        }
        done = threading.Event()
        returned: list[int] = []

        thread = threading.Thread(target=_wait_then_note, args=(wait, cursor, returned, done))
        thread.start()
        time.sleep(0.02)  # the wait is in the daemon before the output it waits for
        sent = time.perf_counter_ns()
        client.call(p.SESSION_INPUT, {**target, "text": "wake"})
        if not done.wait(10):
            raise SystemExit("a wait never woke")
        thread.join()
        samples.append(returned[0] - sent)
        time.sleep(0.05)  # the chat's answer is out before the next cursor is taken
    return sorted(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--wakes", type=int, default=100)
    args = parser.parse_args()
    tools = payload("tools")
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
            policy = Policy(
                daemon_endpoint=address,
                protocol_min=3,
                protocol_max=4,
                access_mode="read_only",
                allowed_hosts=(HOST,),
                tool_timeout_ms=60_000,
                request_timeout_ms=45_000,
                max_output_bytes=1_048_576,
                max_screen_bytes=262_144,
                max_concurrency=8,
            )
            box = tools.Toolbox(policy, p.CLIENT_WINDOW, env={})

            def tool(name: str, arguments: dict) -> dict:
                answer = json.loads(box.handler(name)(arguments))
                if not answer["ok"]:
                    raise SystemExit(f"{name} failed: {answer['error']['code']}")
                return answer["result"]

            # A zmq socket is one thread's: the bare waits get a client of their own.
            with DaemonClient(address) as client, DaemonClient(address) as waiter:
                sid = client.call(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": "bench"})["id"]
                target = {"host": HOST, "session": sid}
                rows = [
                    (
                        "session.list",
                        timed(lambda: client.call(p.SESSION_LIST, {"host": HOST}), args.calls),
                        timed(lambda: tool("pohunek_sessions", {}), args.calls),
                    ),
                    (
                        "session.get",
                        timed(lambda: client.call(p.SESSION_GET, target), args.calls),
                        timed(lambda: tool("pohunek_session_get", {"session": "bench"}), args.calls),
                    ),
                ]
                bare = wake_ups(
                    lambda cursor: waiter.call(p.SESSION_WAIT, {**target, "timeout_ms": 8000, **cursor}),
                    client,
                    sid,
                    args.wakes,
                )
                plugin = wake_ups(
                    lambda cursor: tool("pohunek_session_wait", {"session": sid, "timeout_ms": 8000, **cursor}),
                    client,
                    sid,
                    args.wakes,
                )
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    print(f"{'call':<16}{'bare p50 µs':>14}{'tool p50 µs':>14}{'ratio':>8}")
    worst = 0.0
    for name, direct, through in rows:
        ratio = median(through) / median(direct)
        worst = max(worst, ratio)
        print(f"{name:<16}{median(direct) / 1000:>14.0f}{median(through) / 1000:>14.0f}{ratio:>8.2f}")
    wake = median(plugin) / median(bare)
    print(
        f"wake-up after output: bare wait p50 {median(bare) / 1000:.0f} µs,"
        f" through the plugin {median(plugin) / 1000:.0f} µs: {wake:.2f}x"
    )
    ok = worst <= TARGET_CALL_RATIO and wake <= TARGET_WAKE_RATIO
    print(
        f"targets: tool calls <= {TARGET_CALL_RATIO}x ({worst:.2f}x), wake-up <= {TARGET_WAKE_RATIO}x"
        f" ({wake:.2f}x): {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
