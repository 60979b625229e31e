"""Resident memory of N profiles served by one multiplex gateway, against N per-profile gateways.

For each N (``--profiles 4,8``), on a fresh temporary install with N named profiles, it starts
N real per-profile gateways (``python -m services.gateway``, one per home), waits until every
profile answers ``status`` from the process expected, sums the memory of those processes,
stops them; then does the same with one multiplex gateway serving all N (``--serve``). Memory
is psutil's: RSS, which counts the pages processes share (the interpreter, its libraries) once
per process, and USS, the memory each process alone holds, where the platform tells it (Linux
reads ``/proc/PID/smaps``). Both are measured in the same run; the ratio is multiplex over
per-profile. Target: one process for the largest N uses less than 40% of N gateways, judged
on USS (on RSS where USS cannot be read).

    .venv/bin/python bench/multiplex_memory.py [--profiles 4,8] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from shared import homes  # noqa: E402
from shared.gateways import ops  # noqa: E402
from shared.transport.sync_client import call_all  # noqa: E402
from tests.support.homes import make_profile  # noqa: E402
from tests.support.processes import GatewayProcess, python_env  # noqa: E402

TARGET_RATIO = 0.40
ANSWER_TIMEOUT = 60.0


def start(root: Path, profiles: list[str], *, multiplex: bool) -> list[GatewayProcess]:
    env = python_env(HERMES_LOG_LEVEL="WARNING")
    if multiplex:
        started = [GatewayProcess(root, homes.DEFAULT_PROFILE, env=dict(env), serve=profiles)]
    else:
        started = [GatewayProcess(root, profile, env=dict(env)) for profile in profiles]
    for gateway in started:
        gateway.wait_running(timeout=ANSWER_TIMEOUT)
    return started


def wait_answering(root: Path, expected: dict[str, int]) -> None:
    """Until every profile's socket answers ``status`` from the process expected to serve it."""
    addresses = {
        homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False).control: pid
        for profile, pid in expected.items()
    }
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while True:
        answers = call_all(list(addresses), ops.STATUS, timeout=2.0)
        if all(
            isinstance(a := answers.get(address), dict) and a.get("pid") == pid for address, pid in addresses.items()
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every profile answered status within {ANSWER_TIMEOUT:g}s")
        time.sleep(0.1)


def memory(pids: list[int]) -> dict[str, int | None]:
    """The summed RSS and USS (None where it cannot be read) of ``pids`` and their children."""
    parents = [psutil.Process(pid) for pid in pids]
    processes = [p for parent in parents for p in (parent, *parent.children(recursive=True))]
    rss = sum(p.memory_info().rss for p in processes)
    uss: int | None
    try:
        uss = sum(p.memory_full_info().uss for p in processes)
    except (psutil.AccessDenied, AttributeError):
        uss = None  # not on this platform, or not ours to read: a partial sum would mislead
    return {"rss": rss, "uss": uss}


def measure(base: Path, count: int, *, multiplex: bool) -> dict[str, Any]:
    root = base / f"{'m' if multiplex else 'p'}{count}"
    root.mkdir()
    profiles = [f"p{i:02d}" for i in range(count)]
    for profile in profiles:
        make_profile(root, profile)
    started: list[GatewayProcess] = []
    try:
        started = start(root, profiles, multiplex=multiplex)
        if multiplex:
            expected = dict.fromkeys(profiles, started[0].pid)
        else:
            expected = {g.profile: g.pid for g in started}
        wait_answering(root, expected)
        return {"processes": len(started), **memory([g.pid for g in started])}
    finally:
        for gateway in started:
            gateway.kill()


def _ratio(multiplex: int | None, per_profile: int | None) -> float | None:
    return None if multiplex is None or not per_profile else round(multiplex / per_profile, 3)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def print_table(doc: dict[str, Any]) -> None:
    print("memory of N profiles: N per-profile gateways against one multiplex gateway (MiB, summed)")
    print(f"  {'N':>3}  {'RSS N gw':>9}  {'RSS 1 mx':>9}  {'ratio':>6}  {'USS N gw':>9}  {'USS 1 mx':>9}  {'ratio':>6}")
    for row in doc["rows"]:
        per, one = row["per_profile"], row["multiplex"]
        rss_ratio = "-" if row["rss_ratio"] is None else f"{row['rss_ratio']:.2f}x"
        uss_ratio = "-" if row["uss_ratio"] is None else f"{row['uss_ratio']:.2f}x"
        print(
            f"  {row['profiles']:>3}  {_mib(per['rss']):>9}  {_mib(one['rss']):>9}  {rss_ratio:>6}"
            f"  {_mib(per['uss']):>9}  {_mib(one['uss']):>9}  {uss_ratio:>6}"
        )
    target = doc["target"]
    verdict = "met" if target["met"] else "NOT met"
    print(
        f"target: {target['profiles']} profiles in one process < {target['ratio']:.0%} of {target['profiles']}"
        f" gateways ({target['judged_on']}): {target['measured']:.2f}x, {verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="4,8", help="comma list of profile counts (each at least 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    try:
        counts = sorted({int(n) for n in args.profiles.split(",")})
    except ValueError:
        parser.error("--profiles takes a comma list of whole numbers")
    if counts[0] < 2 or counts[-1] > homes.MAX_SERVED:
        parser.error(f"each profile count must be from 2 to {homes.MAX_SERVED}")

    base = Path(tempfile.mkdtemp(prefix="hm-mem-"))  # short: ipc paths must fit in 107 bytes
    rows = []
    try:
        for count in counts:
            per_profile = measure(base, count, multiplex=False)
            multiplex = measure(base, count, multiplex=True)
            rows.append(
                {
                    "profiles": count,
                    "per_profile": per_profile,
                    "multiplex": multiplex,
                    "rss_ratio": _ratio(multiplex["rss"], per_profile["rss"]),
                    "uss_ratio": _ratio(multiplex["uss"], per_profile["uss"]),
                }
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    largest = rows[-1]
    judged_on = "uss" if largest["uss_ratio"] is not None else "rss"
    measured = largest[f"{judged_on}_ratio"]
    doc = {
        "rows": rows,
        "target": {
            "profiles": largest["profiles"],
            "ratio": TARGET_RATIO,
            "judged_on": judged_on,
            "measured": measured,
            "met": measured is not None and measured < TARGET_RATIO,
        },
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
