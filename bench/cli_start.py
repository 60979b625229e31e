"""Median wall time of ``hermes --version``, ``hermes profile list`` and ``hermes gateway
status``, as a user runs them (the installed console script, a fresh process each time),
against a bare ``python -c pass`` measured in the same run.

Every command runs once untimed first, with bytecode caching on (into a temporary
``PYTHONPYCACHEPREFIX``, even where ``PYTHONDONTWRITEBYTECODE`` is set): an installed package
has its bytecode, and compiling the sources on every start is not what a user waits for.

``gateway status`` runs on an install with ``--gateways`` real gateways (default 2), so it
pays for the sockets and the scan as a user's does. Targets: ``--version`` at most 2.5x the
bare interpreter; ``gateway status`` (which also asks each gateway for a probe turn, its
health) at most 100 ms with 2 gateways, 150 ms with more (20). Where the rest goes:
``python -X importtime -c 'from hermes_cli.main import main; main(["gateway", "status"])'``.

    .venv/bin/python bench/cli_start.py [--runs N] [--gateways N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VENV_BIN = Path(sys.executable).parent

from bench.status import start_gateways, stop_gateways, wait_running  # noqa: E402


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)  # caches bytecode
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--gateways", type=int, default=2)
    args = parser.parse_args()
    hermes = str(VENV_BIN / "hermes")
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as base:  # short: ipc paths must fit
        home = Path(base) / "h"
        home.mkdir()
        env = dict(os.environ, HERMES_HOME=str(home), PYTHONPYCACHEPREFIX=str(Path(base) / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        procs = start_gateways(home, args.gateways)
        try:
            wait_running(home, procs)
            bare = median_ms([sys.executable, "-c", "pass"], args.runs, env)
            version = median_ms([hermes, "--version"], args.runs, env)
            listing = median_ms([hermes, "profile", "list"], args.runs, env)
            status = median_ms([hermes, "gateway", "status"], args.runs, env)
        finally:
            stop_gateways(procs)
    ratio = version / bare
    print(f"python -c pass (baseline)   {bare:6.1f} ms")
    print(
        f"hermes --version            {version:6.1f} ms   ratio {ratio:.2f}   "
        f"(target <= 2.5: {'met' if ratio <= 2.5 else 'NOT met'})"
    )
    print(f"hermes profile list         {listing:6.1f} ms   ratio {listing / bare:.2f}")
    target = status_target_ms(args.gateways)
    print(
        f"hermes gateway status       {status:6.1f} ms   ratio {status / bare:.2f}   "
        f"({args.gateways} gateways; target <= {target} ms: {'met' if status <= target else 'NOT met'})"
    )


def status_target_ms(gateways: int) -> int:
    """The status target: 100 ms for a few gateways, 150 ms for a fleet (20)."""
    return 100 if gateways <= 2 else 150


if __name__ == "__main__":
    main()
