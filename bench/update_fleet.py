"""``hermes update`` of a whole fleet under load, against a single gateway's update.

Each scenario builds a throwaway install the way ``tests/e2e/test_update.py`` does (``tests.support.installs.Install``): a bare origin
cloned from this repository's committed HEAD, an install cloned from it, a dev clone that
pushes the release. It creates the profiles, starts one gateway per profile under the
embedded supervisord (``hermes mesh up --profiles ...``, every gateway on the install's
code), keeps a steady stream of turns going to every gateway, pushes a release and times
``hermes update --yes --json`` while the turns keep coming. The single-gateway scenario
(1 profile, the same load per gateway) runs first in the same run and is the baseline.
Targets: the fleet's update at most 1.5x the single one (the restarts run concurrently), the
single one at most 2 s. ``--runs`` repeats both scenarios; each run is printed, then the
medians, against which the targets are judged.

Load: ``--clients`` tasks per gateway, each with its own client, one turn in flight at a
time (``turn {text, seconds}``), each turn's text a unique tag that the result must echo.

What happens to a turn, from ``services/gateway/ops.py``, ``app.py`` and ``shared/transport/service.py``:

- completed: a result that echoes the tag;
- refused, not accepted: ``draining`` (the gateway's own refusal: nothing was started),
  ``shutting_down`` (the service no longer dispatches; the only turns it could cancel mid-run
  are ones the drain already cut, see below), ``busy`` (over the concurrency limit, not
  dispatched), ``unavailable`` (nothing listening, or the request never left the client). The
  client sends the same turn again after a short pause: counted as retried;
- lost, accepted and never completed: ``turn_cut`` (accepted, then cut by a drain), a
  ``deadline_exceeded`` or ``internal_error`` answer, a result that does not echo the tag;
- unanswered (``timeout``, ``connection_reset`` after a per-call timeout far past any
  restart): the caller cannot tell whether it was accepted, and a turn is not idempotent, so
  it is not sent again. It counts as lost unless it is proven never accepted: it was sent
  after its gateway was seen draining (the ``draining`` state broadcast, or a refusal to any
  of its clients: the gateway sets its draining flag before either leaves it, and a drain
  refuses every later turn), and the newer process has no gap in its numbering (below).

The gateway's side: each process numbers the turns it accepts t1, t2, ... with no gap (the id
is taken in the same step as the turn's registration). The results and ``turn_cut`` answers
are split by gateway process (a turn started after a process started is that process's), and a
number missing from a process's sequence is a turn it accepted whose answer never reached the
caller: lost. The drains' own count of the turns they cut (the receipt's ``restart[].cut``)
must equal the ``turn_cut`` answers.

Where the time goes, per gateway: when it was seen draining, when the old process ended (polled),
when supervisord reaped it and spawned the new one (its log), when the new process had done its
imports (its ``started_at``) and when it started its first turn. Between ``exit`` and
``spawned`` is the restart's own ask: it watches the drained process and, the moment it has
ended, asks supervisord to start the program (``fleet.supervisors.supervisord.respawn``), so
supervisord's 1 s poll never decides. The receipt's note says who started it: supervisord
when asked, or its autorestart, which the ask woke first.

``--host`` runs every scenario's gateways under the gateway host (``hermes mesh up --host``):
its update is one roll, every new gateway forked from one new fork server.

    .venv/bin/python bench/update_fleet.py [--runs 3] [--gateways 8] [--clients 2] [--turn-seconds 0.1] [--host] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import trio  # noqa: E402

from bench.fleet_install import FleetInstall, cleanup  # noqa: E402
from bench.fleet_load import TURN_CUT, Load, Unanswered, account, epoch  # noqa: E402
from shared.protocol import RemoteError  # noqa: E402

TARGET_RATIO = 1.5
TARGET_SINGLE_SECONDS = 2.0


SETTLE_SECONDS = 1.0  # steady load before the update
UPDATE_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0  # for the last turns once the load stops


# --- the throwaway install -----------------------------------------------------------------


# --- the load ---------------------------------------------------------------------------------


# --- one scenario ----------------------------------------------------------------------------

SUPERVISORD_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (exited|spawned): '?hermes-gateway-([a-z0-9_-]+)'?"
)


def _supervisord_events(install: FleetInstall, since: float) -> dict[tuple[str, str], float]:
    """(profile, "exited" | "spawned") -> the first such line after ``since`` in supervisord's
    log (epoch s): when it reaped the old gateway and when it started the new one."""
    events: dict[tuple[str, str], float] = {}
    try:
        lines = (install.root / "logs" / "mesh" / "supervisord.log").read_text(errors="replace").splitlines()
    except OSError:
        return events
    for line in lines:
        match = SUPERVISORD_LINE.match(line)
        if match:
            stamp, what, profile = match.groups()
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()  # local time
            if at >= since - 0.01:
                events.setdefault((profile, what), at)
    return events


def _stage_times(receipt: dict[str, Any], start: float) -> dict[str, float]:
    """Seconds from the start of ``hermes update`` to the updater's start and to the end of
    each step its receipt records (the restart and verify steps are recorded when the
    completion's result comes back)."""
    out = {"updater": round(epoch(receipt["started_at"]) - start, 3)}
    for step in receipt.get("steps", []):
        out[step["name"]] = round(epoch(step["at"]) - start, 3)
    return out


TIMELINE = {  # key -> label
    "drain": "drain",  # first seen draining: its broadcast, or a refusal to one of its clients
    "exit": "exit",  # the old process ended (seen by polling it)
    "reaped": "reaped",  # supervisord logged the exit
    "spawned": "spawned",  # supervisord started the new process
    "imported": "imported",  # the new process's gateway object exists (its imports are done)
    "serving": "serving",  # the first turn the new process started
}


def _timeline(
    install: FleetInstall, load: Load, start: float, processes: dict[str, list[float]]
) -> dict[str, dict[str, float | None]]:
    """Per gateway, seconds from the start of ``hermes update`` to each moment of its restart."""
    supervisord = _supervisord_events(install, start)

    def rel(at: float | None) -> float | None:
        return None if at is None or at < start - 0.01 else round(at - start, 3)

    rows: dict[str, dict[str, float | None]] = {}
    for profile, starts in processes.items():
        new = starts[-1] if len(starts) > 1 else None
        serving = min(
            (
                t.started_at
                for t in load.tally.numbered
                if t.profile == profile and t.started_at and new and t.started_at >= new
            ),
            default=None,
        )
        rows[profile] = {
            "drain": rel(load.tally.drain_seen(profile)),
            "exit": rel(load.exits.get(profile)),
            "reaped": rel(supervisord.get((profile, "exited"))),
            "spawned": rel(supervisord.get((profile, "spawned"))),
            "imported": rel(new),
            "serving": rel(serving),
        }
    return rows


def _unanswered_row(
    call: Unanswered, never_accepted: bool, start: float, load: Load, restarts: list[dict[str, Any]]
) -> dict[str, Any]:
    """Where an unanswered call sits in its gateway's restart, s after `hermes update` started."""
    drain = load.tally.drain_seen(call.profile)
    exit_at = load.exits.get(call.profile)
    restart = next((r for r in restarts if r.get("profile") == call.profile), {})
    return {
        "profile": call.profile,
        "tag": call.tag,
        "code": call.code,
        "never_accepted": never_accepted,
        "sent": round(call.sent - start, 3),
        "drain": None if drain is None else round(drain - start, 3),
        "old_process_exit": None if exit_at is None else round(exit_at - start, 3),
        "drain_finished": restart.get("finished"),
        "drain_cut": restart.get("cut"),
    }


def run_scenario(base: Path, gateways: int, args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    install: FleetInstall | None = None
    try:
        install = FleetInstall(base)
        profiles = [f"g{i:02d}" for i in range(gateways)]
        for profile in profiles:
            install.checked("profile", "create", profile)
        install.mesh_started = True
        host = ("--host",) if args.host else ()  # every gateway forked from one gateway host
        install.checked("mesh", "up", "--profiles", ",".join(profiles), *host, "--json")
        before = install.wait_serving(profiles)
        old_sha = install.head()
        load = Load(install, profiles, args.clients, args.turn_seconds)
        run = trio.run(_drive, install, load, {p: before[p]["pid"] for p in profiles}, args.after)
        processes: dict[str, list[float]] = {p: [epoch(before[p]["started_at"])] for p in profiles}
        for profile in profiles:
            try:
                now = install.status(profile)
            except RemoteError:
                continue
            if now["pid"] != before[profile]["pid"]:
                processes[profile].append(epoch(now["started_at"]))
        report = run["report"]
        receipt = json.loads(Path(report["receipt"]).read_text()) if report.get("receipt") else {}
        restarts = receipt.get("restart") or []
        fleet = report.get("fleet") or []
        tally = load.tally
        books = account(tally, processes)
        timeline = _timeline(install, load, run["wall_start"], processes)
        if run.get("stop_timed_out"):
            notes.append(f"{gateways} gateway(s): the load did not wind down within {STOP_TIMEOUT:g}s")
        return {
            "gateways": gateways,
            "update_seconds": round(run["seconds"], 3),
            "exit_code": run["exit_code"],
            "outcome": report.get("outcome"),
            "moved": install.head() == run["release"] != old_sha,
            "all_current": len(fleet) == gateways and all(r["verdict"] == "current" for r in fleet),
            "fleet": [{k: r.get(k) for k in ("profile", "pid", "state", "running", "verdict")} for r in fleet],
            "followups": report.get("followups", []),
            "served_by_new_process": all(row["serving"] is not None for row in timeline.values()),
            "turns": {
                "completed": tally.completed,
                "retried": sum(tally.retried.values()),
                "lost": books["lost"],
                "unanswered": len(tally.unanswered),
                "retried_by_code": dict(tally.retried),
                "lost_answers_by_code": dict(tally.lost_answers),
                "number_gaps": books["gaps"],
                "unanswered_maybe_accepted": books["unanswered_unproven"],
                "unanswered_not_accepted": len(books["dropped"]),
                "unanswered_calls": [
                    _unanswered_row(u, u in books["dropped"], run["wall_start"], load, restarts)
                    for u in tally.unanswered
                ],
                "abandoned_while_refused": tally.abandoned,
                "cut_by_drains": sum(r.get("cut", 0) for r in restarts),
                "finished_during_drains": sum(r.get("finished", 0) for r in restarts),
                "per_process": books["turns_per_process"],
                "examples": tally.examples,
            },
            "cpu": run["cpu"],
            "stages": _stage_times(receipt, run["wall_start"]) if receipt else {},
            "timeline": timeline,
            "restarts": [
                {k: r.get(k) for k in ("profile", "ok", "reason", "finished", "cut", "note")} for r in restarts
            ],
        }
    finally:
        cleanup(install, base, notes)


async def _drive(install: FleetInstall, load: Load, old_pids: dict[str, int], after: float) -> dict[str, Any]:
    run: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.watch_states)
        nursery.start_soon(load.run)
        await load.warm_up()
        await trio.sleep(SETTLE_SECONDS)
        run["release"] = await trio.to_thread.run_sync(install.release, "release 2")
        nursery.start_soon(load.watch_exits, old_pids)
        run["wall_start"] = time.time()
        own_cpu = sum(os.times()[:2])
        psutil.cpu_percent()  # starts the machine-wide measurement
        started = trio.current_time()
        with trio.fail_after(UPDATE_TIMEOUT):
            done = await trio.run_process(
                install.update_argv(),
                cwd=install.path,
                env=install.env(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        run["seconds"] = trio.current_time() - started
        run["cpu"] = {
            "machine_percent": psutil.cpu_percent(),  # of all cores, over the update
            "cores": psutil.cpu_count(),
            "load_clients_percent_of_a_core": round(100 * (sum(os.times()[:2]) - own_cpu) / run["seconds"], 1),
        }
        run["exit_code"] = done.returncode
        try:
            run["report"] = json.loads(done.stdout)
        except ValueError:
            raise RuntimeError(
                f"hermes update printed no JSON (exit {done.returncode}): {done.stderr.decode()[-2000:]}"
            ) from None
        await trio.sleep(after)
        load.stopping = True
        with trio.move_on_after(STOP_TIMEOUT) as late:
            await load.finished.wait()  # each client ends after the turn it has in flight
        run["stop_timed_out"] = late.cancelled_caught
        nursery.cancel_scope.cancel()
    return run


# --- report ----------------------------------------------------------------------------------


def _turns_text(s: dict[str, Any]) -> str:
    t = s["turns"]
    text = f"turns {t['completed']} completed, {t['retried']} retried, {t['lost']} lost"
    if t["unanswered"]:
        text += f" ({t['unanswered']} unanswered, {t['unanswered_not_accepted']} of them provably never accepted)"
    return text


def _timeline_text(rows: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for key, label in TIMELINE.items():
        values = sorted(v for v in (row[key] for row in rows.values()) if v is not None)
        if not values:
            parts.append(f"{label} -")
        elif len(values) == 1:
            parts.append(f"{label} {values[0]:.2f}")
        else:
            parts.append(f"{label} {statistics.median(values):.2f}/{values[-1]:.2f}")
    return "  ".join(parts)


def _started_by(s: dict[str, Any]) -> str:
    """Who started the new processes, from the restart's notes."""
    notes = [r.get("note") or "" for r in s["restarts"]]
    asked = sum(note.endswith(": it started it") for note in notes)
    woken = sum(note.endswith(": its autorestart had started it already") for note in notes)
    return (
        f"supervisord when asked {asked}, its autorestart woken by the ask {woken}, other {len(notes) - asked - woken}"
    )


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "NOT met"


def print_run(number: int, run: dict[str, Any]) -> None:
    single, fleet = run["single"], run["fleet"]
    scenarios = (("single", single), ("fleet", fleet))
    print(f"run {number}:")
    for name, s in scenarios:
        count = f"{s['gateways']} gateway" + ("s" if s["gateways"] != 1 else "")
        print(f"  {name:<7} {count:<12} {s['update_seconds']:6.2f} s   {_turns_text(s)}")
    print(f"  ratio   fleet / single {run['ratio']:6.2f}x")
    print("  fleet matrix after the update:")
    for name, s in scenarios:
        current = sum(r["verdict"] == "current" for r in s["fleet"])
        line = f"    {name:<7} {current}/{s['gateways']} current, outcome {s['outcome']} (exit {s['exit_code']})"
        if not s["served_by_new_process"]:
            line += "; a gateway served no turn on its new process"
        for owed in s["followups"]:
            line += f"; follow-up {owed['step']}: {owed['reason']}"
        print(f"{line}; started by {_started_by(s)}")
    print("  where the time goes, s after `hermes update` started (fleet: median/last gateway):")
    for name, s in scenarios:
        stages = s["stages"]
        steps = "  ".join(f"{k} {stages[k]:.2f}" for k in ("updater", "apply") if k in stages)
        print(f"    {name:<7} {steps}  |  {_timeline_text(s['timeline'])}  |  done {s['update_seconds']:.2f}")
    cpu = "; ".join(
        f"{name} {s['cpu']['machine_percent']:.0f} % of {s['cpu']['cores']} cores busy, "
        f"{s['cpu']['load_clients_percent_of_a_core']:.0f} % of a core for the load's clients"
        for name, s in scenarios
    )
    print(f"  cpu during the update: {cpu}")
    for name, s in scenarios:
        t = s["turns"]
        if t["lost"] or t["number_gaps"] or t["lost_answers_by_code"]:
            print(
                f"    {name}: LOST: answers {t['lost_answers_by_code']}, number gaps {t['number_gaps']}, "
                f"unanswered and maybe accepted {t['unanswered_maybe_accepted']}"
            )
            for example in t["examples"]:
                print(f"      {example}")
        if t["cut_by_drains"] != t["lost_answers_by_code"].get(TURN_CUT, 0):
            print(
                f"    {name}: the drains cut {t['cut_by_drains']} turn(s), "
                f"{t['lost_answers_by_code'].get(TURN_CUT, 0)} turn_cut answer(s) arrived"
            )
        for u in t["unanswered_calls"]:
            print(
                f"    {name}: no answer ({u['code']}) to turn {u['tag']} sent at {u['sent']:.3f}; its gateway was "
                f"seen draining at {u['drain']}, its old process ended at {u['old_process_exit']}: "
                + ("never accepted" if u["never_accepted"] else "maybe accepted, counted lost")
            )


def print_summary(doc: dict[str, Any]) -> None:
    median = doc["median"]
    ratios = " ".join(f"{run['ratio']:.2f}x" for run in doc["runs"])
    print(f"median of {len(doc['runs'])} run(s) (ratios {ratios}):")
    print(
        f"  single {median['single_seconds']:6.2f} s   (target <= {TARGET_SINGLE_SECONDS:g} s: "
        f"{_verdict(median['single_seconds'], TARGET_SINGLE_SECONDS)})"
    )
    print(f"  fleet  {median['fleet_seconds']:6.2f} s")
    print(f"  ratio  {median['ratio']:6.2f}x  (target <= {TARGET_RATIO:g}x: {_verdict(median['ratio'], TARGET_RATIO)})")
    for note in doc["notes"]:
        print(f"note: {note}")


def _interrupted(exc: BaseException) -> bool:
    """A Ctrl-C, also when trio hands it over inside an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run both scenarios")
    parser.add_argument("--gateways", type=int, default=8)
    parser.add_argument("--clients", type=int, default=2, help="client tasks per gateway, one turn in flight each")
    parser.add_argument("--turn-seconds", type=float, default=0.1, help="how long each turn takes in the gateway")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of load after the update returns")
    parser.add_argument("--host", action="store_true", help="run the gateways under the gateway host (mesh up --host)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.runs < 1 or args.gateways < 1 or args.clients < 1:
        parser.error("--runs, --gateways and --clients must be at least 1")

    base = Path(tempfile.mkdtemp(prefix="hm-upd-"))  # short: ipc paths must fit in 107 bytes
    notes: list[str] = []
    runs: list[dict[str, Any]] = []
    if not args.json:
        print(
            f"hermes update under load: {args.clients} clients per gateway, one {args.turn_seconds:g} s turn "
            f"in flight each, {args.runs} run(s)",
            flush=True,
        )
    try:
        for number in range(1, args.runs + 1):
            single = run_scenario(base / f"{number}1", 1, args, notes)
            fleet = run_scenario(base / f"{number}n", args.gateways, args, notes)
            runs.append(
                {
                    "single": single,
                    "fleet": fleet,
                    "ratio": round(fleet["update_seconds"] / single["update_seconds"], 3),
                }
            )
            if not args.json:
                print_run(number, runs[-1])
                sys.stdout.flush()
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print("interrupted; everything it started is stopped", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc = {
        "clients": args.clients,
        "turn_seconds": args.turn_seconds,
        "runs": runs,
        "median": {
            "single_seconds": statistics.median(run["single"]["update_seconds"] for run in runs),
            "fleet_seconds": statistics.median(run["fleet"]["update_seconds"] for run in runs),
            "ratio": statistics.median(run["ratio"] for run in runs),
        },
        "target_ratio": TARGET_RATIO,
        "target_single_seconds": TARGET_SINGLE_SECONDS,
        "notes": notes,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_summary(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
