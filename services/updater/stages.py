"""The stages of one update run, in the order they run: one table, no I/O.

The updater (the OLD code) runs the first rows: its progress events and its receipt name
them. The commit point lies inside ``apply``, where the tree moves: before it a failure
leaves the install as it was and the run ends ``failed``; after it what goes wrong is owed,
and the update is finished by the completion, a process of the NEW tree, whose own stages
(the steps of its result) are the last rows; only a wave of its restart that fails its
health gate is undone (``revert``: the run ends ``rolled_back``). At the boundary of a
stage that ``stops`` the receipt is rewritten and a stop request ends the run
``interrupted``. ``timeline`` and ``short_timeline`` draw the table for the docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Side(Enum):
    """Where a stage lies relative to the commit point."""

    BEFORE = "before"
    COMMIT = "commit"  # the stage the tree moves in
    AFTER = "after"


@dataclass(frozen=True)
class Stage:
    name: str  # as progress events, ``status`` and the receipt's steps say it
    side: Side
    stops: bool  # a stop request is honoured at its boundary
    what: str  # a few words for the diagram
    new_code: bool = False  # run by the completion, in the new tree


STARTING = Stage("starting", Side.BEFORE, False, "what status says before the first event")
RECOVER = Stage("recover", Side.BEFORE, False, "an earlier run's leftovers repaired (also inside apply)")
PLAN = Stage("plan", Side.BEFORE, True, "read-only: settings, target, fleet, what is owed")
SNAPSHOT = Stage("snapshot", Side.BEFORE, True, "every profile's files, all or nothing")
FETCH = Stage("fetch", Side.BEFORE, True, "the target commit from origin; nothing moves yet")
CANARY = Stage("canary", Side.BEFORE, True, "the fetched code, staged apart, serves a probe turn")
APPLY = Stage("apply", Side.COMMIT, True, "the fast-forward (or the archive): the tree moves")
RESTORE = Stage("restore", Side.AFTER, True, "a rollback's restore of the root home")
COMPLETION = Stage("completion", Side.AFTER, True, "hands over to the new code, waits for its result")
REVERT = Stage("revert", Side.AFTER, False, "a wave failed its gate: the tree back, then the gateways that moved")
VERIFY = Stage("verify", Side.AFTER, True, "the code did not move: the fleet against it")
RESTART = Stage("restart", Side.AFTER, True, "the gateways found wanting, then verify again")
DONE = Stage("done", Side.AFTER, False, "the outcome and the exit code")

# The completion's own steps, in the new tree; a stop reaches it as a signal, not at a boundary.
DEPENDENCIES = Stage("dependencies", Side.AFTER, False, "synced when their spec changed", new_code=True)
MIGRATIONS = Stage("migrations", Side.AFTER, False, "every home's config.yaml", new_code=True)
BYTECODE = Stage("bytecode", Side.AFTER, False, "the tree's code compiled once, for every process", new_code=True)
NEW_RESTART = Stage("restart", Side.AFTER, False, "every gateway: drained, then restarted", new_code=True)
NEW_VERIFY = Stage("verify", Side.AFTER, False, "each gateway against the new commit", new_code=True)

STAGES = (
    STARTING,
    RECOVER,
    PLAN,
    SNAPSHOT,
    FETCH,
    CANARY,
    APPLY,
    RESTORE,
    COMPLETION,
    REVERT,
    VERIFY,
    RESTART,
    DONE,
    DEPENDENCIES,
    MIGRATIONS,
    BYTECODE,
    NEW_RESTART,
    NEW_VERIFY,
)


def updater_stages(table: tuple[Stage, ...] = STAGES) -> tuple[Stage, ...]:
    return tuple(stage for stage in table if not stage.new_code)


def completion_stages(table: tuple[Stage, ...] = STAGES) -> tuple[Stage, ...]:
    return tuple(stage for stage in table if stage.new_code)


# --- the diagram --------------------------------------------------------------------------------

STOPS, GOES_ON = "■", "·"
COMMIT_LINE = "══ commit point: the tree moved; what fails after it is owed, a failed gate reverted ══"


def timeline(table: tuple[Stage, ...] = STAGES) -> str:
    """The table as a timeline, a line per stage, the commit point drawn across it."""
    width = max(len(stage.name) for stage in table)
    lines = ["updater (old code)"]
    for stage in updater_stages(table):
        lines.append(_line(stage, width))
        if stage.side is Side.COMMIT:
            lines.append(COMMIT_LINE)
    lines.append("completion (new code: a fresh process of the new tree)")
    lines += [_line(stage, width) for stage in completion_stages(table)]
    lines += ["", f"{STOPS} a stop request is honoured at the stage's boundary, {GOES_ON} it is not"]
    return "\n".join(lines)


def short_timeline(table: tuple[Stage, ...] = STAGES) -> str:
    """The table as one arrow per code, the commit point marked."""
    old = updater_stages(table)
    cut = next(i for i, stage in enumerate(old) if stage.side is Side.COMMIT) + 1
    rows = [
        ("old code", " → ".join(stage.name for stage in old[:cut])),
        ("", COMMIT_LINE),
        ("old code", " → ".join(stage.name for stage in old[cut:])),
        ("new code", " → ".join(stage.name for stage in completion_stages(table))),
    ]
    return "\n".join(f"{label:<9} {text}" for label, text in rows)


def _line(stage: Stage, width: int) -> str:
    return f"  {STOPS if stage.stops else GOES_ON} {stage.name:<{width}}  {stage.what}"
