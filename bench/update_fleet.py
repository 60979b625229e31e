"""``hermes update`` of fleets of several sizes under load, against one gateway's update.

Columns: ``--sizes`` (default 1,4,8,16) per-profile supervisord programs (``--programs``), and
``mx8`` (``--multiplex``): 8 profiles served by one multiplex gateway. Every column's throwaway install is built up
front, the way ``tests/e2e/test_update.py`` builds one (``tests.support.installs.Install``: a
bare origin cloned from this repository's committed HEAD, an install cloned from it, a dev
clone that pushes releases), its profiles made and its code compiled to bytecode
(``bench.fleet_install``: its processes run as an operator's install does, whatever this
machine's ``PYTHONDONTWRITEBYTECODE``). A scenario starts the column's gateways under the
embedded supervisord (``hermes mesh up --programs --profiles ...`` or ``--serve ...``, on the install's
code), keeps a steady stream of turns going to every profile, pushes a new release and times
``hermes update --yes --json`` while the turns keep coming, then brings the mesh down: each
run's update has a release of its own to apply.

``--runs`` (default 3) runs every column once per run, interleaved, the order rotated by one
each run (1 4 8 16 mx8, then 4 8 16 mx8 1, ...), so a slow spell of a shared machine does not
fall on one column. Each run is printed as it ends, with each column's ratio against one
gateway's update in the same run; then per column the median seconds and the median ratio,
against which the targets are judged: one gateway at most 2 s, 8 at most 1.5x one, 16 at most
2.5x one, no turn lost in any run. A scenario that fails is printed with why, and the bench
goes on. Then a text chart of the scaling (``--plot FILE.png`` draws it too, where matplotlib
is importable), a gateway's start against a bare interpreter (``bench/gateway_start.py``) and
forked gateways against cold starts (``bench/fork_start.py``), both in the one-gateway
install. ``--json`` prints all of it as one document.

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
  refuses every later turn), or its old process's drain said how many turns it took in all
  (``accepted``, in the receipt's ``restart[]``) and every one of them reached a caller; and
  the newer process has no gap in its numbering (below).

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

``--host N`` adds a column of N gateways run by the gateway host (``hermes mesh up --host``, the
mesh's default on Linux): its update is one roll, every new gateway forked from one new fork server.

    .venv/bin/python bench/update_fleet.py [--runs 3] [--sizes 1,4,8,16] [--multiplex 8] [--host 8] [--clients 2]
        [--turn-seconds 0.1] [--start-samples 10] [--forks 8] [--fork-rounds 3] [--json] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import trio  # noqa: E402

from bench import fleet_report, fork_start, gateway_start  # noqa: E402
from bench.fleet_install import FleetInstall, cleanup, stop  # noqa: E402
from bench.fleet_load import Load, Tally, Unanswered, account, epoch  # noqa: E402
from bench.fleet_report import BASELINE  # noqa: E402
from fleet.supervisors.supervisord.names import HOST_PROGRAM, MULTIPLEX_PROGRAM, unit_name  # noqa: E402
from shared import homes  # noqa: E402
from shared.layout import GATEWAY_STARTS_FILE  # noqa: E402
from shared.protocol import RemoteError  # noqa: E402

SETTLE_SECONDS = 1.0  # steady load before the update
UPDATE_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0  # for the last turns once the load stops


# --- the throwaway install -----------------------------------------------------------------


# --- the load ---------------------------------------------------------------------------------


# --- one scenario ----------------------------------------------------------------------------

SUPERVISORD_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (exited|spawned): '?(hermes-[a-z0-9_-]+)'?")


def _supervisord_events(install: FleetInstall, since: float) -> dict[tuple[str, str], float]:
    """(program, "exited" | "spawned") -> the first such line after ``since`` in supervisord's
    log (epoch s): when it reaped the old gateway and when it started the new one."""
    events: dict[tuple[str, str], float] = {}
    try:
        lines = (install.root / "logs" / "mesh" / "supervisord.log").read_text(errors="replace").splitlines()
    except OSError:
        return events
    for line in lines:
        match = SUPERVISORD_LINE.match(line)
        if match:
            stamp, what, program = match.groups()
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()  # local time
            if at >= since - 0.01:
                events.setdefault((program, what), at)
    return events


def _stage_times(receipt: dict[str, Any], start: float) -> dict[str, float]:
    """Seconds from the start of ``hermes update`` to the updater's start and to the end of
    each step its receipt records (the restart and verify steps are recorded when the
    completion's result comes back)."""
    out = {"updater": round(epoch(receipt["started_at"]) - start, 3)}
    for step in receipt.get("steps", []):
        out[step["name"]] = round(epoch(step["at"]) - start, 3)
    return out


def _timeline(
    install: FleetInstall,
    load: Load,
    start: float,
    processes: dict[str, list[float]],
    program: Callable[[str], str],
) -> dict[str, dict[str, float | None]]:
    """Per profile (``program``: the supervisord program that runs it), seconds from the start of ``hermes update`` to each moment of its restart."""
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
            "reaped": rel(supervisord.get((program(profile), "exited"))),
            "spawned": rel(supervisord.get((program(profile), "spawned"))),
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


@dataclass(frozen=True)
class Column:
    """One form of fleet the bench updates: ``gateways`` per-profile gateways, (``multiplex``)
    one multiplex gateway serving that many profiles, or (``host``) that many gateways forked by
    the gateway host."""

    name: str
    gateways: int
    multiplex: bool = False
    host: bool = False

    @property
    def profiles(self) -> list[str]:
        if self.multiplex:  # the root's own profile, which exists in every install, and named ones
            return [homes.DEFAULT_PROFILE, *(f"g{i:02d}" for i in range(1, self.gateways))]
        return [f"g{i:02d}" for i in range(self.gateways)]

    def program(self, profile: str) -> str:
        """The supervisord program that runs ``profile``'s gateway."""
        if self.host:
            return HOST_PROGRAM
        return MULTIPLEX_PROGRAM if self.multiplex else unit_name(profile)

    def mesh_up(self) -> list[str]:
        which = "--serve" if self.multiplex else "--profiles"
        form = "--host" if self.host else "--programs"  # named either way: the mesh's default is the host
        return ["mesh", "up", which, ",".join(self.profiles), form, "--json"]


def build(base: Path, column: Column) -> FleetInstall:
    """The column's install, its profiles made, its mesh not started."""
    install = FleetInstall(base)
    for profile in column.profiles:
        if profile != homes.DEFAULT_PROFILE:
            install.checked("profile", "create", profile)
    return install


def _per_process(tally: Tally, column: Column) -> Tally:
    """The tally as ``account`` must read it: a multiplex gateway numbers its turns per process,
    across the profiles it serves, and its drain is the process's, seen on any of them."""
    if not column.multiplex:
        return tally

    def first(seen: dict[str, float]) -> dict[str, float]:
        return {column.name: min(seen.values())} if seen else {}

    return replace(
        tally,
        numbered=[replace(t, profile=column.name) for t in tally.numbered],
        unanswered=[replace(u, profile=column.name) for u in tally.unanswered],
        first_refusal=first(tally.first_refusal),
        draining_event=first(tally.draining_event),
    )


def _process_starts(column: Column, processes: dict[str, list[float]]) -> dict[str, list[float]]:
    """Per accounting key, each process's start: a multiplex gateway's profiles share one
    process, which stamps each profile's state at its start (the earliest stands for it)."""
    if not column.multiplex:
        return processes
    return {column.name: [min(starts) for starts in zip(*processes.values(), strict=False)]}


def _accepted(column: Column, restarts: list[dict[str, Any]]) -> dict[str, int]:
    """Per accounting key, how many turns its drained process took in all (the receipt's word,
    from the drain's answer); a multiplex process's is its lead profile's outcome."""
    said = {r["profile"]: r["accepted"] for r in restarts if isinstance(r.get("accepted"), int)}
    if not column.multiplex:
        return said
    return {column.name: max(said.values())} if said else {}


def run_scenario(install: FleetInstall, column: Column, release: str, args: argparse.Namespace) -> dict[str, Any]:
    profiles = column.profiles
    for profile in profiles:  # every run starts its gateways anew: not a respawn storm
        (homes.profile_home(profile, install.root) / GATEWAY_STARTS_FILE).unlink(missing_ok=True)
    install.mesh_started = True
    install.checked(*column.mesh_up())
    before = install.wait_serving(profiles)
    old_sha = install.head()
    load = Load(install, profiles, args.clients, args.turn_seconds)
    run = trio.run(_drive, install, load, {p: before[p]["pid"] for p in profiles}, release, args.after)
    processes: dict[str, list[float]] = {p: [epoch(before[p]["started_at"])] for p in profiles}
    for profile in profiles:
        try:
            now = install.status(profile)
        except RemoteError:
            continue
        if (now["pid"], now["started_at"]) != (before[profile]["pid"], before[profile]["started_at"]):
            processes[profile].append(epoch(now["started_at"]))  # a re-executed process keeps its pid
    report = run["report"]
    receipt = json.loads(Path(report["receipt"]).read_text()) if report.get("receipt") else {}
    restarts = receipt.get("restart") or []
    fleet = report.get("fleet") or []
    tally = load.tally
    grouped = _per_process(tally, column)
    books = account(grouped, _process_starts(column, processes), _accepted(column, restarts))
    timeline = _timeline(install, load, run["wall_start"], processes, column.program)
    notes = []
    if run.get("stop_timed_out"):
        notes.append(f"the load did not wind down within {STOP_TIMEOUT:g}s")
    return {
        "column": column.name,
        "gateways": column.gateways,
        "multiplex": column.multiplex,
        "update_seconds": round(run["seconds"], 3),
        "exit_code": run["exit_code"],
        "outcome": report.get("outcome"),
        "moved": install.head() == run["release"] != old_sha,
        "all_current": len(fleet) == len(profiles) and all(r["verdict"] == "current" for r in fleet),
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
                _unanswered_row(u, g in books["dropped"], run["wall_start"], load, restarts)
                for u, g in zip(tally.unanswered, grouped.unanswered, strict=True)
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
        "restarts": [{k: r.get(k) for k in ("profile", "ok", "reason", "finished", "cut", "note")} for r in restarts],
        "notes": notes,
    }


async def _drive(
    install: FleetInstall, load: Load, old_pids: dict[str, int], release: str, after: float
) -> dict[str, Any]:
    run: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.watch_states)
        nursery.start_soon(load.run)
        await load.warm_up()
        await trio.sleep(SETTLE_SECONDS)
        run["release"] = await trio.to_thread.run_sync(install.release, release)
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


def _interrupted(exc: BaseException) -> bool:
    """A Ctrl-C, also when trio hands it over inside an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


def _columns(args: argparse.Namespace) -> list[Column]:
    columns = [Column(str(size), size) for size in args.sizes]
    if args.multiplex:
        columns.append(Column(f"mx{args.multiplex}", args.multiplex, multiplex=True))
    columns += [Column(f"host{size}", size, host=True) for size in args.host]
    return columns


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"sizes must be distinct and at least 1: {text!r}")
    return sizes


def _sizes_or_none(text: str) -> list[int]:
    return [] if text == "0" else _sizes(text)


def _failure(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_failure(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"[-2000:]


def _measure(
    installs: dict[str, FleetInstall], columns: list[Column], args: argparse.Namespace, notes: list[str]
) -> list[dict[str, Any]]:
    """``args.runs`` runs of every column, the order rotated by one each run; a scenario that
    fails is recorded with why, its install stopped, and the bench goes on."""
    runs: list[dict[str, Any]] = []
    for number in range(1, args.runs + 1):
        shift = (number - 1) % len(columns)
        order = columns[shift:] + columns[:shift]
        scenarios: dict[str, dict[str, Any]] = {}
        for column in order:
            install = installs.get(column.name)
            if install is None:
                scenarios[column.name] = {"column": column.name, "error": "its install could not be built"}
                continue
            try:
                scenarios[column.name] = run_scenario(install, column, f"release {number}", args)
            except Exception as exc:  # any failure of one scenario: the others still run
                scenarios[column.name] = {"column": column.name, "error": _failure(exc)}
            finally:
                stop(install, install.base, notes)
        run = {"number": number, "order": [c.name for c in order], "scenarios": scenarios}
        run["ratios"] = fleet_report.ratios(scenarios)
        runs.append(run)
        if not args.json:
            print(fleet_report.run_text(run, [c.name for c in columns]), flush=True)
    return runs


def _starts(install: FleetInstall | None, args: argparse.Namespace) -> dict[str, Any]:
    """A gateway's start against a bare interpreter, and forked against cold, on ``install``."""
    out: dict[str, Any] = {}
    if install is None:
        return {"error": "no install to start gateways in"}
    if args.start_samples:
        try:
            out["gateway_start"] = gateway_start.measure(install, args.start_samples)
        except Exception as exc:  # reported; the rest of the document stands
            out["gateway_start"] = {"error": _failure(exc)}
    if args.forks:
        try:
            out["fork_start"] = fork_start.measure(install, args.forks, args.fork_rounds)
        except Exception as exc:  # reported; the rest of the document stands
            out["fork_start"] = {"error": _failure(exc)}
    return out


def _starts_text(starts: dict[str, Any]) -> str:
    lines = []
    for name, text in (("gateway_start", gateway_start.report_text), ("fork_start", fork_start.report_text)):
        if name in starts:
            lines.append(f"{name}: FAILED: {starts[name]['error']}" if "error" in starts[name] else text(starts[name]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run every column")
    parser.add_argument("--sizes", type=_sizes, default=[1, 4, 8, 16], help="fleet sizes, e.g. 1,4,8,16")
    parser.add_argument("--multiplex", type=int, default=8, help="profiles of the multiplex column (0: none)")
    parser.add_argument(
        "--host", type=_sizes_or_none, default=[], help="fleet sizes of the gateway host's columns, e.g. 8,16 (0: none)"
    )
    parser.add_argument("--clients", type=int, default=2, help="client tasks per gateway, one turn in flight each")
    parser.add_argument("--turn-seconds", type=float, default=0.1, help="how long each turn takes in the gateway")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of load after the update returns")
    parser.add_argument("--start-samples", type=int, default=10, help="a gateway's start against python (0: skip)")
    parser.add_argument("--forks", type=int, default=8, help="gateways forked against cold starts (0: skip)")
    parser.add_argument("--fork-rounds", type=int, default=3, help="rounds of the forked and cold starts")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="the scaling as an image (needs matplotlib)")
    args = parser.parse_args()
    if args.runs < 1 or args.clients < 1 or args.fork_rounds < 1:
        parser.error("--runs, --clients and --fork-rounds must be at least 1")
    if min(args.multiplex, args.start_samples, args.forks) < 0:
        parser.error("--multiplex, --start-samples and --forks must not be negative")
    if BASELINE not in {str(size) for size in args.sizes}:
        parser.error(f"--sizes must include {BASELINE}: every ratio is taken against it")

    columns = _columns(args)
    base = Path(tempfile.mkdtemp(prefix="hm-upd-"))  # short: ipc paths must fit in 107 bytes
    notes: list[str] = []
    installs: dict[str, FleetInstall] = {}
    began = time.monotonic()
    if not args.json:
        print(
            f"hermes update under load: {args.clients} clients per gateway, one {args.turn_seconds:g} s turn "
            f"in flight each, {args.runs} run(s) of {' '.join(c.name for c in columns)}",
            flush=True,
        )
    try:
        for column in columns:  # every install up front; each run pushes it a new release
            try:
                installs[column.name] = build(base / column.name, column)
            except Exception as exc:  # its column fails in every run, the others go on
                notes.append(f"the install of {column.name} could not be built: {_failure(exc)}")
        runs = _measure(installs, columns, args, notes)
        starts = _starts(installs.get(BASELINE), args)
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print("interrupted; everything it started is stopped", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return 130
    finally:
        for name, install in installs.items():
            cleanup(install, base / name, notes)
        shutil.rmtree(base, ignore_errors=True)
    summary = fleet_report.summarize(runs, [c.name for c in columns])
    if args.plot:
        problem = fleet_report.plot(summary, args.plot)
        if problem:
            notes.append(problem)
    doc = {
        "clients": args.clients,
        "turn_seconds": args.turn_seconds,
        "columns": [c.name for c in columns],
        "runs": runs,
        **summary,
        "starts": starts,
        "wall_seconds": round(time.monotonic() - began, 1),
        "notes": notes,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(fleet_report.summary_text(summary, len(runs)))
        print(fleet_report.chart_text(summary))
        print(_starts_text(starts))
        for note in notes:
            print(f"note: {note}")
        print(f"the whole bench took {doc['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
