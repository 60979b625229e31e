"""N gateways forked from one process that has imported the gateway, against N cold starts at once.

The measure a fork-server design would be judged by. In a throwaway install (its code and
bytecode, ``bench.fleet_install.FleetInstall``):

- cold: ``--gateways`` N ``python -m services.gateway`` started at once, one per profile;
- forked: one process (this file, run with ``--fork-server`` on the install's code) imports
  the gateway's modules (``services.gateway.main``, ``.app``, ``.process``, trio), then forks
  N children, each of which runs its profile's gateway in that interpreter
  (``run_gateway``: its own trio run, zmq context and sockets).

Each start is timed from its spawn (or its fork) to the two moments its state file shows (as
in ``bench/gateway_start.py``): ``imported`` (its ``started_at``) and ``serving`` (running:
every socket answers). Printed: the median and the last of the N, for both forms, the
fork server's own imports apart (paid once, before any fork). ``--rounds`` repeats both
forms, interleaved; the medians are over the rounds.

    .venv/bin/python bench/fork_start.py [--gateways 8] [--rounds 3] [--json]
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.fleet_install import FleetInstall

ROOT = Path(__file__).resolve().parent.parent
FORK_SERVER = "--fork-server"
SERVER_TIMEOUT = 120.0  # for the fork server's imports and forks, and for its end


# --- the fork server: runs on the install's code, imports nothing of this checkout -------------


def fork_server(root: str, profiles: list[str]) -> int:
    """Import the gateway, fork one gateway per profile, print when each was forked (one JSON
    line), then stop them all when stdin closes or says so."""
    started = time.perf_counter()
    import trio  # noqa: F401  what every gateway runs on, loaded once here

    import services.gateway.app
    import services.gateway.process  # noqa: F401
    from services.gateway.main import run_gateway
    from shared import homes

    imported = time.perf_counter() - started
    children: dict[str, dict[str, Any]] = {}
    for profile in profiles:
        home = str(homes.profile_home(profile, Path(root)))
        at = time.time()
        pid = os.fork()
        if pid == 0:
            os.environ["HERMES_HOME"] = home
            code = 1
            try:
                code = run_gateway()
            finally:
                os._exit(code)
        children[profile] = {"pid": pid, "forked_at": at}
    print(json.dumps({"import_seconds": round(imported, 4), "children": children}), flush=True)
    sys.stdin.readline()  # the bench is done with them, or has gone
    for child in children.values():
        os.kill(child["pid"], signal.SIGTERM)
    for child in children.values():
        os.waitpid(child["pid"], 0)
    return 0


# --- the bench ----------------------------------------------------------------------------------


def _homes(install: FleetInstall, prefix: str, count: int) -> dict[str, Path]:
    from bench.gateway_start import fresh_home

    return {f"{prefix}{i:02d}": fresh_home(install, f"{prefix}{i:02d}") for i in range(count)}


def _cold(install: FleetInstall, count: int) -> dict[str, Any]:
    from bench.gateway_start import gateway_argv, stop_gateways, wait_started

    procs: dict[str, tuple[Path, subprocess.Popen[bytes], float]] = {}
    try:
        for profile, home in _homes(install, "cold", count).items():
            at = time.time()
            proc = subprocess.Popen(
                gateway_argv(),
                cwd=install.path,
                env={**install.env(), "HERMES_HOME": str(home)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs[profile] = (home, proc, at)
        return {"starts": wait_started({p: (home, proc.pid, at) for p, (home, proc, at) in procs.items()})}
    finally:
        stop_gateways([proc.pid for _, proc, _ in procs.values()])
        for _, proc, _ in procs.values():
            proc.wait(timeout=SERVER_TIMEOUT)


def _forked(install: FleetInstall, count: int) -> dict[str, Any]:
    from bench.gateway_start import stop_gateways, wait_started

    homes = _homes(install, "fork", count)
    server = subprocess.Popen(
        [sys.executable, __file__, FORK_SERVER, str(install.root), *homes],
        cwd=install.path,
        env=install.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    children: dict[str, Any] = {}
    try:
        line = _read_line(server)
        said = json.loads(line)
        children = said["children"]
        starts = wait_started({p: (homes[p], c["pid"], c["forked_at"]) for p, c in children.items()})
        return {"import_seconds": said["import_seconds"], "starts": starts}
    finally:
        if server.stdin:
            server.stdin.close()  # the server stops its children
        try:
            server.wait(timeout=SERVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop_gateways([c["pid"] for c in children.values()])
            server.kill()
            server.wait(timeout=SERVER_TIMEOUT)


def _read_line(server: subprocess.Popen[str]) -> str:
    """The fork server's one line, within ``SERVER_TIMEOUT``; its absence raises."""
    import select

    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], SERVER_TIMEOUT)
    line = server.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"the fork server said nothing within {SERVER_TIMEOUT:g}s (exit {server.poll()})")
    return line


def _summary(rounds: list[dict[str, Any]], form: str, moment: str) -> dict[str, float]:
    """Over the rounds, the median of each round's median and of its last start."""
    per_round = [sorted(s[moment] for s in r[form]["starts"].values()) for r in rounds]
    return {
        "median": round(statistics.median(statistics.median(v) for v in per_round), 4),
        "last": round(statistics.median(v[-1] for v in per_round), 4),
    }


def measure(install: FleetInstall, count: int, rounds: int) -> dict[str, Any]:
    """``rounds`` of N cold starts and N forks, interleaved, and their medians (s)."""
    runs = [{"cold": _cold(install, count), "forked": _forked(install, count)} for _ in range(rounds)]
    summary = {
        form: {moment: _summary(runs, form, moment) for moment in ("imported", "serving")}
        for form in ("cold", "forked")
    }
    return {
        "gateways": count,
        "rounds": rounds,
        "median_seconds": summary,
        "fork_server_import_seconds": statistics.median(r["forked"]["import_seconds"] for r in runs),
        "serving_last_forked_to_cold": round(
            summary["forked"]["serving"]["last"] / summary["cold"]["serving"]["last"], 3
        ),
        "runs": runs,
    }


def report_text(doc: dict[str, Any]) -> str:
    s = doc["median_seconds"]
    lines = [f"{doc['gateways']} gateways started at once, median of {doc['rounds']} round(s), s (median/last):"]
    for form in ("cold", "forked"):
        cells = "  ".join(f"{m} {s[form][m]['median']:.3f}/{s[form][m]['last']:.3f}" for m in ("imported", "serving"))
        lines.append(f"  {form:<7} {cells}")
    lines.append(f"  the fork server's imports, once before the forks: {doc['fork_server_import_seconds']:.3f} s")
    lines.append(f"  last serving, forked / cold: {doc['serving_last_forked_to_cold']:.2f}x")
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from bench.fleet_install import in_throwaway_install

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.gateways < 1 or args.rounds < 1:
        parser.error("--gateways and --rounds must be at least 1")
    doc = in_throwaway_install("hm-fork-", lambda install: measure(install, args.gateways, args.rounds))
    print(json.dumps(doc, indent=2) if args.json else report_text(doc))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [FORK_SERVER]:
        sys.exit(fork_server(sys.argv[2], sys.argv[3:]))
    sys.exit(main())
