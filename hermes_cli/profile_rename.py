"""The rules of ``hermes profile rename OLD NEW``: which renames are refused, the steps a rename
takes in order, its journal, and what an interrupted rename does next. Pure: no files here.

A rename changes many things named after a profile (its home, its gateway's supervisor unit,
what an update or a guest handoff owes it), so it is a journal of steps. The journal names the
step about to be taken, and every step can be taken again. Moving the home is the point of no
return: a rename stopped before it is rolled back (the old gateway started again), one stopped
after it is carried through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from shared import homes
from shared.home_env import is_named_profile
from shared.homes import ProfileError

SCHEMA = 1
# Under profiles/, where no profile's name can start with a dot.
JOURNAL_FILE = ".rename.json"
LOCK_FILE = ".rename.lock"

# In order. The home moves at MOVE_HOME: what comes before is undone, what comes after is done.
DRAIN = "drain"  # OLD's gateway drained (its turns in flight finish), then stopped by its supervisor
MOVE_HOME = "move_home"
MOVE_UNITS = "move_units"  # the supervisor unit rewritten under NEW's name, OLD's removed
MOVE_OBLIGATIONS = "move_obligations"  # what is owed to OLD, and the active-profile pointer
START_GATEWAY = "start_gateway"  # NEW's gateway started under its unit, if OLD's was running
FINISH = "finish"  # what OLD's name left outside its home, then the journal removed
STEPS = (DRAIN, MOVE_HOME, MOVE_UNITS, MOVE_OBLIGATIONS, START_GATEWAY, FINISH)
# Undoing a rename that never moved the home: OLD's gateway started again if it was running.
RESTART_OLD = "restart_old"

FORWARD = "forward"
BACK = "back"


def journal_path(root: Path) -> Path:
    return homes.profiles_dir(root) / JOURNAL_FILE


class SameProfileName(ProfileError):
    code = "profile_rename_same_name"


class RenameUnsupported(ProfileError):
    code = "profile_rename_unsupported"


class RenameJournalCorrupt(ProfileError):
    code = "profile_rename_journal_corrupt"


class RenameStuck(ProfileError):
    """Both homes or neither: the journal cannot tell which side of the move the rename is on."""

    code = "profile_rename_stuck"


def check_names(old: object, new: object) -> tuple[str, str]:
    """``(old, new)`` when renaming ``old`` to ``new`` may be tried; else a typed refusal whose
    detail names the field: an invalid name, the default profile on either side, one name twice."""
    names: list[str] = []
    for field, name in (("old_name", old), ("new_name", new)):
        try:
            names.append(homes.validate_profile_name(name))
        except homes.InvalidProfileName as exc:
            exc.detail = {**(exc.detail or {}), "field": field}
            raise
        if name == homes.DEFAULT_PROFILE:
            raise homes.ProfileReserved(
                "the default profile is the root home itself: it is never renamed, and no profile is renamed to it",
                detail={"field": field, "name": name},
            )
    if names[0] == names[1]:
        raise SameProfileName(f"{names[0]!r} is already its name", detail={"field": "new_name", "name": names[1]})
    return names[0], names[1]


class Gateway(NamedTuple):
    """OLD's gateway as the rename found it: who supervises it, and whether it was running."""

    kind: str
    scope: str
    running: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "scope": self.scope, "running": self.running}


class Journal(NamedTuple):
    old: str
    new: str
    step: str  # the step about to be taken (or being taken when the process died)
    gateway: Gateway | None  # None: no supervisor unit runs OLD's gateway

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "old": self.old,
            "new": self.new,
            "step": self.step,
            "gateway": self.gateway.to_dict() if self.gateway else None,
        }

    def at(self, step: str) -> Journal:
        if step not in STEPS:
            raise ValueError(f"unknown rename step {step!r}")
        return Journal(self.old, self.new, step, self.gateway)

    @property
    def moved(self) -> bool:
        """Whether the rename is past its point of no return."""
        return STEPS.index(self.step) > STEPS.index(MOVE_HOME)


def parse_journal(data: object) -> Journal:
    """The journal in ``data`` (as read from its file); RenameJournalCorrupt for any other shape."""

    def corrupt(why: str) -> RenameJournalCorrupt:
        return RenameJournalCorrupt(f"the rename journal is unreadable: {why}", detail={"reason": why})

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise corrupt(f"not a schema {SCHEMA} rename journal")
    old, new, step, gateway = data.get("old"), data.get("new"), data.get("step"), data.get("gateway")
    if not (isinstance(old, str) and isinstance(new, str) and old != new) or not all(
        is_named_profile(n) for n in (old, new)
    ):
        raise corrupt("old and new must be two named profiles")
    if step not in STEPS:
        raise corrupt(f"unknown step {step!r}")
    if gateway is None:
        return Journal(old, new, step, None)
    if not (
        isinstance(gateway, dict)
        and isinstance(gateway.get("kind"), str)
        and isinstance(gateway.get("scope"), str)
        and isinstance(gateway.get("running"), bool)
    ):
        raise corrupt("gateway must be null or {kind, scope, running}")
    return Journal(old, new, step, Gateway(gateway["kind"], gateway["scope"], gateway["running"]))


def steps_after(step: str) -> tuple[str, ...]:
    """The steps still to take once ``step`` is done."""
    return STEPS[STEPS.index(step) + 1 :]


def resume(journal: Journal, *, old_home: bool, new_home: bool) -> tuple[str, tuple[str, ...]]:
    """What an interrupted rename does next, given which of the two homes exist: ``(FORWARD,
    steps)`` to carry it through from the step it was on, or ``(BACK, (RESTART_OLD,))`` to undo
    it. At MOVE_HOME the homes tell whether the one rename happened; RenameStuck when both or
    neither exist, which no step of a rename leaves."""
    if journal.step == DRAIN:
        return BACK, (RESTART_OLD,)
    if journal.step == MOVE_HOME:
        if old_home and not new_home:
            return BACK, (RESTART_OLD,)
        if new_home and not old_home:
            return FORWARD, steps_after(MOVE_HOME)
        raise RenameStuck(
            f"renaming {journal.old!r} to {journal.new!r} stopped at moving its home, and "
            f"{'both homes exist' if old_home else 'neither home exists'}; move one aside and run it again",
            detail={"old": journal.old, "new": journal.new, "old_home": old_home, "new_home": new_home},
        )
    return FORWARD, STEPS[STEPS.index(journal.step) :]
