"""Finding an install's gateways: control sockets against a full process scan.

Starts 20 real gateways (one per profile under a temporary root), then times
``discover(root, scan=False)`` (one STATUS call per profile's control socket) against the
baseline ``scan_gateways(root)`` (``/proc`` over every process, the canonical gateway matcher
on each full argv, environ read for the gateway-shaped ones), the median of N rounds each, in
the same run on the same machine. The sockets are timed twice: connecting afresh each round
(what one ``hermes gateway status`` pays) and on the connections a first call kept (what a
command's next call to the same gateways pays). All must find exactly the 20 pids; any
mismatch is printed. Target: the sockets faster than the scan.

The scan's cost grows with every process on the machine, the sockets' only with the gateways,
so the ratio depends on the host. ``--background K`` adds K idle processes (``sleep``) for the
duration of the run, to see the ratio on a host as busy as a desktop.

    .venv/bin/python bench/status.py [--gateways N] [--rounds N] [--background K]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from fleet.discovery import GatewayRecord, discover, scan_gateways  # noqa: E402
from shared import homes  # noqa: E402
from shared.files import read_json  # noqa: E402
from shared.layout import GATEWAY_STATE_FILE  # noqa: E402


def start_gateways(root: Path, count: int) -> dict[str, subprocess.Popen]:
    procs: dict[str, subprocess.Popen] = {}
    for i in range(count):
        profile = f"p{i:02d}"
        home = homes.profile_home(profile, root)
        home.mkdir(parents=True)
        env = {**_base_env(), "HERMES_HOME": str(home)}
        procs[profile] = subprocess.Popen(
            [sys.executable, "-m", "services.gateway"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return procs


def _base_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "HERMES_LOG_LEVEL": "WARNING"}


def wait_running(root: Path, procs: dict[str, subprocess.Popen], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    waiting = dict(procs)
    while waiting:
        for profile, proc in list(waiting.items()):
            if proc.poll() is not None:
                raise RuntimeError(f"gateway {profile} exited {proc.returncode} while starting")
            state = read_json(homes.profile_home(profile, root) / GATEWAY_STATE_FILE, default=None)
            if state and state.get("pid") == proc.pid and state.get("gateway_state") == "running":
                del waiting[profile]
        if time.monotonic() > deadline:
            raise RuntimeError(f"gateways not running after {timeout}s: {sorted(waiting)}")
        time.sleep(0.05)


def stop_gateways(procs: dict[str, subprocess.Popen], timeout: float = 15.0) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def median_seconds(fn: Callable[[], list[GatewayRecord]], rounds: int) -> tuple[float, list[GatewayRecord]]:
    fn()  # warm-up: imports, first connections
    times: list[float] = []
    result: list[GatewayRecord] = []
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def exactness(name: str, records: list[GatewayRecord], expected: set[int]) -> bool:
    found = [r.pid for r in records]
    missing, extra = expected - set(found), set(found) - expected
    duplicates = len(found) - len(set(found))
    ok = not (missing or extra or duplicates)
    print(f"  {name:<8} found {len(set(found))}/{len(expected)}" + ("" if ok else " MISMATCH"))
    if missing:
        print(f"    missing pids: {sorted(missing)}")
    if extra:
        print(f"    extra pids:   {sorted(extra)}")
    if duplicates:
        print(f"    {duplicates} duplicate record(s)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--background", type=int, default=0, metavar="K", help="idle processes to add")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="hm-bench-"))  # short: ipc paths must fit in 107 bytes
    root = base / "hermes"
    root.mkdir()
    procs: dict[str, subprocess.Popen] = {}
    idle: list[subprocess.Popen] = []
    try:
        idle = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.background)]
        procs = start_gateways(root, args.gateways)
        wait_running(root, procs)
        expected = {p.pid for p in procs.values()}
        process_count = len(psutil.pids())

        kept: dict = {}
        try:
            sockets_s, by_socket = median_seconds(lambda: discover(root, scan=False), args.rounds)
            kept_s, by_kept = median_seconds(lambda: discover(root, scan=False, sockets=kept), args.rounds)
        finally:
            for sock in kept.values():
                sock.close(linger=0)
        scan_s, by_scan = median_seconds(lambda: scan_gateways(root), args.rounds)

        print(f"{args.gateways} gateways, {process_count} processes on this machine, median of {args.rounds} rounds")
        print(f"  sockets  discover(root, scan=False), fresh connections  {sockets_s * 1000:8.2f} ms")
        print(f"  kept     discover(root, scan=False), kept connections   {kept_s * 1000:8.2f} ms")
        print(f"  scan     scan_gateways(root)                            {scan_s * 1000:8.2f} ms")
        for name, seconds in (("sockets", sockets_s), ("kept", kept_s)):
            ratio = scan_s / seconds
            verdict = "met" if ratio > 1 else "NOT met"
            print(f"  ratio    scan / {name:<7}  {ratio:6.2f}x  (target: faster than the scan, > 1x: {verdict})")
        print("exactness:")
        exactness("sockets", by_socket, expected)
        exactness("kept", by_kept, expected)
        exactness("scan", by_scan, expected)
        sources = {r.source for r in by_socket}
        if sources != {"socket"}:
            print(f"  sockets run answered through {sorted(sources)}, not only control sockets")
    finally:
        stop_gateways(procs)
        for proc in idle:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
