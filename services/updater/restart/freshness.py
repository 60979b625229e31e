"""Whether a gateway's status answer shows its restart done: a fresh process, running, on the
expected code. Pure: an answer in, a judgement out; the waits that poll for answers decide
with it when to stop.

"Fresh" means not the process the restart replaces, judged by pid and start time (the pid
alone under systemd, which names a unit's main process by pid). A gateway that re-executed
itself keeps its pid and start time, so after a re-exec an answer on the expected code is
fresh too. Under a supervisor that says which process runs the unit, only that process counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.gateways import ops

SILENT = "silent"  # nothing answered
OLD = "old"  # the process the restart replaces (or, under a supervisor, not its main process)
STARTING = "starting"  # a fresh process, not running yet
STALE = "stale"  # a fresh running process on other code
FRESH = "fresh"  # done


@dataclass(frozen=True)
class OldProcess:
    """The process a restart replaces."""

    pid: int
    start_time: int | None = None
    by_pid: bool = False  # the pid alone tells (systemd's main pid): the start time is not asked

    def answered(self, answer: Mapping[str, Any]) -> bool:
        """Whether ``answer`` came from this process."""
        if answer.get("pid") != self.pid:
            return False
        return self.by_pid or answer.get("start_time") == self.start_time


@dataclass(frozen=True)
class Judgement:
    verdict: str  # SILENT, OLD, STARTING, STALE or FRESH
    pid: int | None = None
    state: str | None = None
    code_sha: str | None = None

    @property
    def done(self) -> bool:
        return self.verdict == FRESH


def judge(
    answer: Mapping[str, Any] | None,
    old: OldProcess | None,
    expected_sha: str | None,
    *,
    reexec: bool = False,
    main_pid: int | None = None,
) -> Judgement:
    """What ``answer`` (a gateway's status, None when it did not answer) says of a restart that
    replaces ``old`` (None: nothing ran) and should bring up ``expected_sha`` (None: any code).
    ``reexec``: the gateway re-executed itself. ``main_pid``: the pid its supervisor says runs it."""
    if not answer:
        return Judgement(SILENT)
    seen = Judgement(SILENT, answer.get("pid"), answer.get("state"), answer.get("code_sha"))
    fresh = old is None or not old.answered(answer)
    if main_pid is not None:
        fresh = fresh and seen.pid == main_pid
    if reexec:
        fresh = fresh or seen.code_sha == expected_sha
    if not fresh:
        verdict = OLD
    elif seen.state != ops.RUNNING:
        verdict = STARTING
    elif expected_sha is not None and seen.code_sha != expected_sha:
        verdict = STALE
    else:
        verdict = FRESH
    return Judgement(verdict, seen.pid, seen.state, seen.code_sha)
