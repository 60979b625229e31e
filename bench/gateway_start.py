"""A gateway's start against a bare interpreter's, in a throwaway install, in the same run.

Three starts, interleaved, each a fresh process on the install's code and its bytecode
(``bench.fleet_install.FleetInstall``): ``python -c pass``, ``python -c "import trio, zmq"``
(the two libraries every gateway loads) and ``python -m services.gateway`` for a profile of
the install. The interpreters are timed to their exit; the gateway to two moments its state
file shows: ``imported`` (its ``started_at``, stamped once its imports are done and its state
exists) and ``serving`` (the file says running, which it says only once every socket
answers; polled every few milliseconds). The gateway is then stopped (``SIGTERM``). Its
respawn-storm record is cleared before each start, so no start waits for the ones before it.

    .venv/bin/python bench/gateway_start.py [--samples 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fleet_install import FleetInstall, in_throwaway_install  # noqa: E402
from bench.fleet_load import epoch  # noqa: E402
from shared import homes  # noqa: E402
from shared.files import read_json  # noqa: E402
from shared.layout import GATEWAY_STARTS_FILE, GATEWAY_STATE_FILE  # noqa: E402

PROFILE = "starts"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
POLL = 0.005
BARE = {"pass": "pass", "import_trio_zmq": "import trio, zmq"}


def gateway_argv() -> list[str]:
    return [sys.executable, "-m", "services.gateway"]


def fresh_home(install: FleetInstall, profile: str) -> Path:
    """``profile``'s home in the install, made if missing, with no record of earlier starts."""
    home = homes.profile_home(profile, install.root)
    if not home.exists():
        homes.create_profile(install.root, profile)
    (home / GATEWAY_STARTS_FILE).unlink(missing_ok=True)
    return home


def wait_started(started: dict[str, tuple[Path, int, float]], timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """For each name -> (home, pid, when it was started, epoch s): seconds from its start to
    ``imported`` and ``serving``, read from its state file. A start not serving within
    ``timeout`` raises, naming it."""
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while len(found) < len(started):
        for name, (home, pid, at) in started.items():
            if name in found:
                continue
            state = read_json(home / GATEWAY_STATE_FILE, default=None)
            if state and state.get("pid") == pid and state.get("gateway_state") == "running":
                found[name] = {
                    "imported": round(epoch(state["started_at"]) - at, 4),
                    "serving": round(time.time() - at, 4),
                }
        if len(found) < len(started):
            if time.monotonic() > deadline:
                raise RuntimeError(f"not serving after {timeout:g}s: {sorted(set(started) - set(found))}")
            time.sleep(POLL)
    return found


def stop_gateways(pids: list[int]) -> None:
    """SIGTERM (a short drain), then SIGKILL for any still running after ``STOP_TIMEOUT``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a child of ours that has ended is reaped here
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True  # not ours: it still exists


def _bare(install: FleetInstall, code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=install.path, env=install.env(), check=True, timeout=START_TIMEOUT)
    return time.perf_counter() - started


def one_start(install: FleetInstall) -> dict[str, Any]:
    home = fresh_home(install, PROFILE)
    at = time.time()
    proc = subprocess.Popen(
        gateway_argv(),
        cwd=install.path,
        env={**install.env(), "HERMES_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return wait_started({PROFILE: (home, proc.pid, at)})[PROFILE]
    finally:
        stop_gateways([proc.pid])
        proc.wait(timeout=STOP_TIMEOUT)


def measure(install: FleetInstall, samples: int) -> dict[str, Any]:
    """``samples`` of each start, interleaved, and their medians (s) and ratios."""
    times: dict[str, list[float]] = {"pass": [], "import_trio_zmq": [], "gateway_imported": [], "gateway_serving": []}
    _bare(install, "pass")  # the first start of anything pays for the disk cache
    one_start(install)
    for _ in range(samples):
        for name, code in BARE.items():
            times[name].append(_bare(install, code))
        gateway = one_start(install)
        times["gateway_imported"].append(gateway["imported"])
        times["gateway_serving"].append(gateway["serving"])
    median = {name: round(statistics.median(values), 4) for name, values in times.items()}
    return {
        "samples": samples,
        "median_seconds": median,
        "ratio_to_pass": {name: round(value / median["pass"], 2) for name, value in median.items()},
        "serving_to_import_trio_zmq": round(median["gateway_serving"] / median["import_trio_zmq"], 2),
        "seconds": {name: [round(v, 4) for v in values] for name, values in times.items()},
    }


def report_text(doc: dict[str, Any]) -> str:
    median, ratio = doc["median_seconds"], doc["ratio_to_pass"]
    labels = {
        "pass": "python -c pass",
        "import_trio_zmq": 'python -c "import trio, zmq"',
        "gateway_imported": "gateway, imports done",
        "gateway_serving": "gateway, serving",
    }
    lines = [f"a gateway's start, median of {doc['samples']}:"]
    lines += [f"  {labels[k]:<30} {median[k] * 1000:7.1f} ms  {ratio[k]:5.2f}x pass" for k in labels]
    lines.append(f"  gateway serving / import trio, zmq  {doc['serving_to_import_trio_zmq']:.2f}x")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    doc = in_throwaway_install("hm-gws-", lambda install: measure(install, args.samples))
    print(json.dumps(doc, indent=2) if args.json else report_text(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
