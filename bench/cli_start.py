"""Median wall time of ``hermes --version`` and ``hermes profile list``, as a user runs them
(the installed console script, a fresh process each time), against a bare
``python -c pass`` measured in the same run.

    .venv/bin/python bench/cli_start.py [--runs N]
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

VENV_BIN = Path(sys.executable).parent


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    hermes = str(VENV_BIN / "hermes")
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as home:
        env = dict(os.environ, HERMES_HOME=home)
        subprocess.run([hermes, "profile", "create", "coder"], env=env, check=True, stdout=subprocess.DEVNULL)
        bare = median_ms([sys.executable, "-c", "pass"], args.runs, env)
        version = median_ms([hermes, "--version"], args.runs, env)
        listing = median_ms([hermes, "profile", "list"], args.runs, env)
    print(f"python -c pass (baseline)   {bare:6.1f} ms")
    print(f"hermes --version            {version:6.1f} ms   ratio {version / bare:.2f}   (target <= 100 ms)")
    print(f"hermes profile list         {listing:6.1f} ms   ratio {listing / bare:.2f}")


if __name__ == "__main__":
    main()
