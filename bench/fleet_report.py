"""The update-fleet benchmark's figures: each run's scenarios as text, the medians and ratios
over the runs judged against the targets, and the fleet's scaling as a text chart (and, where
matplotlib is importable, as an image)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.fleet_load import TURN_CUT

BASELINE = "1"  # the column every ratio is taken against: one gateway, in the same run
TARGET_BASELINE_SECONDS = 2.0
TARGET_RATIOS = {"8": 1.5, "16": 2.5}
CHART_WIDTH = 50

TIMELINE = {  # key -> label, for each gateway's restart
    "drain": "drain",  # first seen draining: its broadcast, or a refusal to one of its clients
    "exit": "exit",  # the old process ended (seen by polling it)
    "reaped": "reaped",  # supervisord logged the exit
    "spawned": "spawned",  # supervisord started the new process
    "imported": "imported",  # the new process's gateway object exists (its imports are done)
    "serving": "serving",  # the first turn the new process started
}


# --- the figures -------------------------------------------------------------------------------


def ratios(scenarios: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each scenario's update time against one gateway's in the same run (none without it)."""
    one = scenarios.get(BASELINE, {}).get("update_seconds")
    if not one:
        return {}
    return {name: round(s["update_seconds"] / one, 3) for name, s in scenarios.items() if "update_seconds" in s}


def summarize(runs: list[dict[str, Any]], columns: list[str]) -> dict[str, Any]:
    """Per column the median seconds and the median of its same-run ratios; the targets."""
    median: dict[str, Any] = {}
    for name in columns:
        done = [run["scenarios"][name] for run in runs if "update_seconds" in run["scenarios"].get(name, {})]
        same_run = [run["ratios"][name] for run in runs if name in run["ratios"]]
        median[name] = {
            "seconds": round(statistics.median(s["update_seconds"] for s in done), 3) if done else None,
            "ratio_to_one": round(statistics.median(same_run), 3) if same_run else None,
            "runs": len(done),
            "failed": len(runs) - len(done),
        }
    return {"median": median, "targets": _targets(runs, median)}


def _targets(runs: list[dict[str, Any]], median: dict[str, Any]) -> list[dict[str, Any]]:
    targets = []
    one = median.get(BASELINE, {}).get("seconds")
    if one is not None:
        targets.append(_target(f"one gateway <= {TARGET_BASELINE_SECONDS:g} s", one, TARGET_BASELINE_SECONDS))
    for size, limit in TARGET_RATIOS.items():
        for name, form in ((size, "gateways"), (f"host{size}", "gateways of the host")):
            ratio = median.get(name, {}).get("ratio_to_one")
            if ratio is not None:
                targets.append(_target(f"{size} {form} <= {limit:g}x one", ratio, limit))
    lost = [sum(s["turns"]["lost"] for s in run["scenarios"].values() if "turns" in s) for run in runs]
    failed = sum("error" in s for run in runs for s in run["scenarios"].values())
    targets.append(
        {
            "target": "0 turns lost in every run",
            "value": lost,
            "met": not any(lost) and not failed,
            **({"failed_scenarios": failed} if failed else {}),
        }
    )
    return targets


def _target(what: str, value: float, limit: float) -> dict[str, Any]:
    return {"target": what, "value": value, "limit": limit, "met": value <= limit}


# --- text ----------------------------------------------------------------------------------------


def _label(s: dict[str, Any]) -> str:
    if s["multiplex"]:
        return f"{s['gateways']} profiles, 1 multiplex gateway"
    return f"{s['gateways']} gateway" + ("s" if s["gateways"] != 1 else "")


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
    """Who started the new processes, from the restart's notes (a multiplex process's other
    profiles, restarted through the first, have no note of their own on it)."""
    notes = [r.get("note") or "" for r in s["restarts"] if "asked supervisord" in (r.get("note") or "")]
    asked = sum(": it started it" in note for note in notes)
    woken = sum(": its autorestart had started it already" in note for note in notes)
    return (
        f"supervisord when asked {asked}, its autorestart woken by the ask {woken}, other {len(notes) - asked - woken}"
    )


def run_text(run: dict[str, Any], columns: list[str]) -> str:
    """One run: each scenario's time, ratio and turns, the fleet after it, where the time went."""
    lines = [f"run {run['number']} (order {' '.join(run['order'])}):"]
    done = {name: run["scenarios"][name] for name in columns if "update_seconds" in run["scenarios"].get(name, {})}
    for name in columns:
        s = run["scenarios"].get(name)
        if s is None:
            continue
        if "error" in s:
            lines.append(f"  {name:<5} FAILED: {s['error']}")
            continue
        ratio = run["ratios"].get(name)
        ratio_text = f"{ratio:5.2f}x one" if ratio is not None else "    -     "
        lines.append(f"  {name:<5} {_label(s):<32} {s['update_seconds']:6.2f} s  {ratio_text}   {_turns_text(s)}")
    lines.append("  fleet matrix after the update:")
    for name, s in done.items():
        current = sum(r["verdict"] == "current" for r in s["fleet"])
        line = f"    {name:<5} {current}/{len(s['fleet'])} current, outcome {s['outcome']} (exit {s['exit_code']})"
        if not s["served_by_new_process"]:
            line += "; a gateway served no turn on its new process"
        for owed in s["followups"]:
            line += f"; follow-up {owed['step']}: {owed['reason']}"
        lines.append(f"{line}; started by {_started_by(s)}")
    lines.append("  where the time goes, s after `hermes update` started (median/last gateway):")
    for name, s in done.items():
        stages = s["stages"]
        steps = "  ".join(f"{k} {stages[k]:.2f}" for k in ("updater", "apply") if k in stages)
        lines.append(f"    {name:<5} {steps}  |  {_timeline_text(s['timeline'])}  |  done {s['update_seconds']:.2f}")
    lines.append("  cpu during the update:")
    for name, s in done.items():
        cpu = s["cpu"]
        lines.append(
            f"    {name:<5} {cpu['machine_percent']:.0f} % of {cpu['cores']} cores busy, "
            f"{cpu['load_clients_percent_of_a_core']:.0f} % of a core for the load's clients"
        )
    for name, s in done.items():
        lines += _losses_text(name, s)
    return "\n".join(lines)


def _losses_text(name: str, s: dict[str, Any]) -> list[str]:
    t, lines = s["turns"], []
    if t["lost"] or t["number_gaps"] or t["lost_answers_by_code"]:
        lines.append(
            f"    {name}: LOST: answers {t['lost_answers_by_code']}, number gaps {t['number_gaps']}, "
            f"unanswered and maybe accepted {t['unanswered_maybe_accepted']}"
        )
        lines += [f"      {example}" for example in t["examples"]]
    if t["cut_by_drains"] != t["lost_answers_by_code"].get(TURN_CUT, 0):
        lines.append(
            f"    {name}: the drains cut {t['cut_by_drains']} turn(s), "
            f"{t['lost_answers_by_code'].get(TURN_CUT, 0)} turn_cut answer(s) arrived"
        )
    for u in t["unanswered_calls"]:
        lines.append(
            f"    {name}: no answer ({u['code']}) to turn {u['tag']} sent at {u['sent']:.3f}; its gateway was "
            f"seen draining at {u['drain']}, its old process ended at {u['old_process_exit']}: "
            + ("never accepted" if u["never_accepted"] else "maybe accepted, counted lost")
        )
    for note in s["notes"]:
        lines.append(f"    {name}: {note}")
    return lines


def summary_text(summary: dict[str, Any], runs: int) -> str:
    lines = [f"median of {runs} run(s), per column (ratios: against one gateway in the same run):"]
    for name, m in summary["median"].items():
        seconds = f"{m['seconds']:6.2f} s" if m["seconds"] is not None else "     - "
        ratio = f"{m['ratio_to_one']:5.2f}x one" if m["ratio_to_one"] is not None else "    -     "
        failed = f", {m['failed']} failed" if m["failed"] else ""
        lines.append(f"  {name:<5} {seconds}  {ratio}   ({m['runs']} run(s){failed})")
    lines.append("targets:")
    for t in summary["targets"]:
        failed = f" ({t['failed_scenarios']} scenario(s) failed)" if t.get("failed_scenarios") else ""
        lines.append(f"  {t['target']:<36} {t['value']!s:<12} {'met' if t['met'] else 'NOT met'}{failed}")
    return "\n".join(lines)


def chart_text(summary: dict[str, Any]) -> str:
    """Median seconds per column as horizontal bars, to scale."""
    rows = [(name, m["seconds"]) for name, m in summary["median"].items() if m["seconds"] is not None]
    if not rows:
        return "scaling: no column has a median"
    top = max(seconds for _, seconds in rows)
    lines = ["scaling, median seconds of `hermes update` per column:"]
    for name, seconds in rows:
        bar = "#" * max(1, round(CHART_WIDTH * seconds / top))
        lines.append(f"  {name:>5} | {bar} {seconds:.2f}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> str | None:
    """The scaling as an image at ``path``: gateways against median seconds, the per-profile
    gateways as a line, any multiplex column as a point. Why not, when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not importable: no plot written to {path}"
    per_profile: list[tuple[int, float]] = []
    multiplex: list[tuple[int, float]] = []
    for name, m in summary["median"].items():
        if m["seconds"] is not None:
            (multiplex if name.startswith("mx") else per_profile).append((int(name.removeprefix("mx")), m["seconds"]))
    figure, axes = plt.subplots()
    if per_profile:
        axes.plot(*zip(*sorted(per_profile), strict=True), marker="o", label="one gateway per profile")
    if multiplex:
        axes.plot(*zip(*multiplex, strict=True), linestyle="none", marker="s", label="one multiplex gateway")
    axes.set_xlabel("profiles")
    axes.set_ylabel("hermes update, median seconds")
    axes.set_ylim(bottom=0)
    axes.legend()
    figure.savefig(path)
    plt.close(figure)
    return None
