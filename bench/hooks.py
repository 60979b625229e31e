"""Latency of one hook call, ``report_activity("working")``, from inside a managed session.

Everything is measured in the same run on the same machine; only the ratios mean much.
Each call is timed on its own (``perf_counter_ns`` around it), and so is the baseline:

- baseline: an empty Python function call;
- unmanaged: the call outside a managed session;
- reporter up: a PULL socket draining the intake, in its own process (calls in a tight
  loop can outrun it on a small machine: the outcomes column shows how many it took);
- reporter down: nothing bound on the intake;
- reporter flooded: a PULL socket bound and never read, its pipes filled before timing.

Each case uses a fresh client; its first call (which makes the socket and, when a reporter
is there, waits for the connection) is shown apart and kept out of p50/p99.

    .venv/bin/python bench/hooks.py [--calls N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import zmq  # noqa: E402

from shared import homes  # noqa: E402
from shared.hooks import HookClient  # noqa: E402

TARGET_P99_NS = 1_000_000
MANAGED = {"POHUNEK_SESSION_ID": "bench"}


def empty() -> None:
    pass


def timed(call: Callable[[], object], n: int) -> list[int]:
    """Nanoseconds of each of ``n`` calls, sorted."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        began = clock()
        call()
        samples.append(clock() - began)
    samples.sort()
    return samples


def percentile(samples: list[int], p: float) -> int:
    return samples[min(len(samples) - 1, int(len(samples) * p))]


def drain(address: str) -> subprocess.Popen:
    """A reporter that reads everything, in its own process: as a thread of this one it would
    get the GIL only between the calls being timed and fall behind, measuring the GIL."""
    program = (
        "import sys, zmq\n"
        "pull = zmq.Context().socket(zmq.PULL); pull.bind(sys.argv[1]); print('ready', flush=True)\n"
        "while True: pull.recv()\n"
    )
    reporter = subprocess.Popen([sys.executable, "-c", program, address], stdout=subprocess.PIPE)
    reporter.stdout.readline()
    return reporter


def measure(client: HookClient, n: int, *, fresh: bool = True) -> tuple[int | None, list[int], dict[str, int]]:
    """The first call's nanoseconds (None unless the client is ``fresh``), the next ``n``
    calls' (sorted), and the outcomes of those ``n``."""
    call = lambda: client.report_activity("working")  # noqa: E731
    first = timed(call, 1)[0] if fresh else None
    before = client.counters()
    samples = timed(call, n)
    return first, samples, {k: v - before[k] for k, v in client.counters().items()}


def fill(client: HookClient) -> int:
    """Send until the reporter's pipes stay full even after libzmq had time to move reports
    along them; how many were taken."""
    taken = 0
    while True:
        while client.report_activity("working"):
            taken += 1
        time.sleep(0.1)
        if not client.report_activity("working"):
            return taken
        taken += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    n = args.calls

    context = zmq.Context()
    rows: list[tuple[str, int | None, list[int], dict[str, int] | None]] = []
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        base = Path(tmp)
        homes.ensure_run_dir(base)
        intake = f"ipc://{base}/run/hook_reporter.in"

        timed(empty, n)  # warm-up
        rows.append(("empty function call (baseline)", None, timed(empty, n), None))

        unmanaged = HookClient({}, base)
        rows.append(("unmanaged", *measure(unmanaged, n)))

        up = HookClient(MANAGED, base)
        reporter = drain(intake)
        try:
            rows.append(("reporter up (draining)", *measure(up, n)))
        finally:
            up.close()
            reporter.kill()
            reporter.wait()

        down = HookClient(MANAGED, base)
        rows.append(("reporter down (nothing bound)", *measure(down, n)))
        down.close()

        flooded = HookClient(MANAGED, base)
        pull = context.socket(zmq.PULL)
        pull.bind(intake)
        try:
            filled = fill(flooded)
            rows.append((f"reporter flooded (full after {filled})", *measure(flooded, n, fresh=False)))
        finally:
            pull.close(linger=0)
            flooded.close()
    context.term()

    baseline = rows[0][2]
    b50, b99 = percentile(baseline, 0.5), percentile(baseline, 0.99)
    print(f"{n} calls each; ratios are against the baseline's own p50 and p99; target p99 <= 1 ms")
    header = f"{'case':40} {'first':>9} {'p50':>9} {'p99':>9} {'p50 x':>8} {'p99 x':>8}  {'target':6}  outcomes"
    print(header)
    print("-" * len(header))
    for name, first, samples, counts in rows:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        first_text = "" if first is None else f"{first / 1000:7.1f}us"
        verdict = "" if counts is None else ("met" if p99 <= TARGET_P99_NS else "MISSED")
        outcomes = "" if counts is None else ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        print(
            f"{name:40} {first_text:>9} {p50 / 1000:7.2f}us {p99 / 1000:7.2f}us "
            f"{p50 / b50:7.0f}x {p99 / b99:7.0f}x  {verdict:6}  {outcomes}"
        )


if __name__ == "__main__":
    main()
