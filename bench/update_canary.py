"""What the canary and the gates cost: ``hermes update`` of 8 gateways with them, against the
same update without them (``--no-canary``), and a rollback against that update, in the same run.

One throwaway install (``bench.fleet_install``: bytecode, warnings only), ``--profiles``
profiles under the embedded supervisord (``hermes mesh up --profiles ...``), and the root's
``update.min_healthy`` set to ``--min-healthy``. Each run times one update of each kind,
ungated and gated (the canary, then the restart in one gated wave), interleaved and the order
swapped every run, each with a release of its own; then ``hermes update --rollback`` of the
newest; and one gateway's start (``bench/gateway_start.py``: until it serves). The targets,
by medians: the canary and the gates add at most one gateway's start plus ``min_healthy`` plus
1 s to an update (``extra / budget <= 1``, where ``extra`` is the gated update's median less
the ungated one's and ``budget`` the gateway's start plus ``min_healthy`` plus 1 s), and a
rollback takes at most 1.2x an ungated update. The receipt's own ``took`` of the canary step
is shown beside them.

    .venv/bin/python bench/update_canary.py [--runs 3] [--profiles 8] [--min-healthy 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fleet_install import CLI_TIMEOUT, FleetInstall, in_throwaway_install  # noqa: E402
from bench.gateway_start import one_start  # noqa: E402

KINDS = ("ungated", "gated")
ROLLBACK_TARGET = 1.2


def _update(install: FleetInstall, kind: str, n: int) -> dict[str, Any]:
    if kind == "rollback":
        argv = ["update", "--rollback", "--yes", "--json"]
    else:
        install.release(f"release {n} ({kind})")
        argv = ["update", "--yes", "--json", *(["--no-canary"] if kind == "ungated" else [])]
    started = time.perf_counter()
    done = install.hermes(*argv, timeout=CLI_TIMEOUT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the {kind} update exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    receipt = json.loads(Path(json.loads(done.stdout)["receipt"]).read_text())
    canary = next((s["detail"] for s in receipt["steps"] if s["name"] == "canary"), None)
    if (canary is None) != (kind != "gated"):
        raise RuntimeError(f"the {kind} update's receipt says canary {canary!r}")
    return {"seconds": seconds, "canary_took": canary["took"] if canary else None}


def measure(install: FleetInstall, runs: int, profiles: int, min_healthy: float) -> dict[str, Any]:
    names = [f"p{i}" for i in range(1, profiles + 1)]
    for name in names:
        install.checked("profile", "create", name)
    (install.root / "config.yaml").write_text(f"update:\n  min_healthy: {min_healthy:g}\n")
    install.mesh_started = True  # brought down whatever happens from here
    install.checked("mesh", "up", "--profiles", ",".join(names), timeout=CLI_TIMEOUT)
    install.wait_serving(names)
    one_start(install)  # the first start of anything pays for the disk cache
    seconds: dict[str, list[float]] = {kind: [] for kind in (*KINDS, "rollback", "gateway_start", "canary_took")}
    n = 1
    for run in range(runs):
        for kind in [*(KINDS if run % 2 == 0 else reversed(KINDS)), "rollback"]:
            n += 1
            timed = _update(install, kind, n)
            seconds[kind].append(timed["seconds"])
            if timed["canary_took"] is not None:
                seconds["canary_took"].append(timed["canary_took"])
            install.wait_serving(names)
        seconds["gateway_start"].append(one_start(install)["serving"])
    median = {name: round(statistics.median(values), 3) for name, values in seconds.items()}
    extra = round(median["gated"] - median["ungated"], 3)
    budget = round(median["gateway_start"] + min_healthy + 1.0, 3)
    return {
        "runs": runs,
        "profiles": profiles,
        "min_healthy": min_healthy,
        "median_seconds": median,
        "gated_to_ungated": round(median["gated"] / median["ungated"], 2),
        "extra_seconds": extra,
        "budget_seconds": budget,
        "extra_to_budget": round(extra / budget, 2),
        "rollback_to_ungated": round(median["rollback"] / median["ungated"], 2),
        "target_met": extra <= budget and median["rollback"] <= ROLLBACK_TARGET * median["ungated"],
        "seconds": {name: [round(v, 3) for v in values] for name, values in seconds.items()},
    }


def report_text(doc: dict[str, Any]) -> str:
    median = doc["median_seconds"]
    return "\n".join(
        [
            f"hermes update of {doc['profiles']} gateways, min_healthy {doc['min_healthy']:g} s, "
            f"median of {doc['runs']}:",
            f"  without canary and gates  {median['ungated']:7.2f} s",
            f"  with them                 {median['gated']:7.2f} s  ({doc['gated_to_ungated']:.2f}x)",
            f"  a rollback                {median['rollback']:7.2f} s  ({doc['rollback_to_ungated']:.2f}x, "
            f"target <= {ROLLBACK_TARGET:g}x)",
            f"  the canary step's own     {median['canary_took']:7.2f} s  (receipt)",
            f"  a gateway's start         {median['gateway_start']:7.2f} s",
            f"  extra {doc['extra_seconds']:.2f} s against a budget of {doc['budget_seconds']:.2f} s "
            f"(start + min_healthy + 1 s): {doc['extra_to_budget']:.2f}x, "
            + ("both targets met" if doc["target_met"] else "a target NOT met"),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profiles", type=int, default=8)
    parser.add_argument("--min-healthy", type=float, default=2.0, help="the root's update.min_healthy, seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.runs < 1 or args.profiles < 1 or not 0 <= args.min_healthy <= 60:
        parser.error("--runs and --profiles must be at least 1, --min-healthy from 0 to 60")
    doc = in_throwaway_install("hm-can-", lambda install: measure(install, args.runs, args.profiles, args.min_healthy))
    print(json.dumps(doc, indent=2) if args.json else report_text(doc))
    return 0 if doc["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
