"""A logical session and its runtime, as the daemon keeps them. No I/O.

A session has a logical id that never changes and a runtime that does: each launch or resume
is a new runtime, with a new ``worker_instance_id`` and a ``runtime_generation`` one higher.
States: ``starting`` (created, no runtime yet) -> ``running`` (a runtime is live) -> ``stopped``
(stopped by a caller), ``done`` (exit 0) or ``failed`` (exit non-zero, or the launch failed).
``updated_at`` moves on every change of the record (not on output: that is the output offset).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from shared.operator import u64
from simulators.operator_sim.detect import choose_activity


class Clock:
    """RFC 3339 UTC stamps with nanoseconds, fixed width, strictly increasing: two changes in
    one nanosecond still get two stamps, so ``after_updated_at`` can never miss one."""

    def __init__(self) -> None:
        self._last = 0

    def stamp(self, now_ns: int | None = None) -> str:
        now = time.time_ns() if now_ns is None else now_ns
        self._last = max(now, self._last + 1)
        seconds, nanos = divmod(self._last, 1_000_000_000)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def new_session_id() -> str:
    return f"s-{secrets.token_hex(8)}"


def new_worker_instance_id() -> str:
    return f"wi-{secrets.token_hex(8)}"


@dataclass
class Runtime:
    """The session's current runtime: ``live``, ``lost`` (the daemon restarted under it) or ``none``."""

    state: str = "none"
    generation: int = 0
    worker_instance_id: str | None = None
    started_at: str | None = None
    loss_reason: str | None = None

    def coordinates(self) -> tuple[str | None, int]:
        return self.worker_instance_id, self.generation

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"state": self.state, "runtime_generation": u64.to_wire(self.generation)}
        for key in ("worker_instance_id", "started_at", "loss_reason"):
            if getattr(self, key) is not None:
                wire[key] = getattr(self, key)
        return wire


@dataclass
class Session:
    id: str
    host: str
    agent: str
    agent_base: str
    cwd: str
    created_at: str
    updated_at: str
    cols: int
    rows: int
    fork_supported: bool
    name: str | None = None
    state: str = "starting"
    pid: int = 0
    exit_code: int | None = None
    runtime: Runtime = field(default_factory=Runtime)
    native_session_id: str | None = None
    continuation_ids: list[str] = field(default_factory=list)
    reported_activity: str | None = None
    screen_activity: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    project_id: str | None = None
    repo: str | None = None
    branch: str | None = None
    base_branch: str | None = None
    worktree_path: str | None = None

    @property
    def live(self) -> bool:
        return self.runtime.state == "live"

    @property
    def activity(self) -> tuple[str | None, str]:
        return choose_activity(self.reported_activity, self.screen_activity)

    @property
    def resumable(self) -> bool:
        """A native reference was reported and the session is neither live nor finished."""
        return self.native_session_id is not None and not self.live and self.state in ("stopped", "running")

    def summary(self) -> dict[str, Any]:
        """The v4 wire summary (``simulators.operator_sim.bridge`` adds the v3 spelling)."""
        activity, source = self.activity
        wire: dict[str, Any] = {
            "id": self.id,
            "host": self.host,
            "external": False,
            "capabilities": {"fork": self.fork_supported, "resume": self.resumable},
            "agent": self.agent,
            "agent_base": self.agent_base,
            "cwd": self.cwd,
            "pid": self.pid,
            "runtime": self.runtime.to_wire(),
            "cols": self.cols,
            "rows": self.rows,
            "state": self.state,
            "state_source": source,
            "metadata": dict(self.metadata),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        optional = {
            "name": self.name,
            "activity": activity,
            "native_session_id": self.native_session_id,
            "exit_code": self.exit_code,
            "project_id": self.project_id,
            "repo": self.repo,
            "branch": self.branch,
            "worktree_path": self.worktree_path,
        }
        wire.update({k: v for k, v in optional.items() if v is not None})
        if self.project_id is not None:
            wire["is_linked_worktree"] = self.worktree_path is not None
        return wire

    # --- transitions (each stamps the record) ---------------------------------------------

    def launched(self, pid: int, at: str) -> None:
        self.runtime = Runtime("live", self.runtime.generation + 1, new_worker_instance_id(), at)
        self.pid = pid
        self.state = "running"
        self.exit_code = None
        self.reported_activity = self.screen_activity = None
        self.updated_at = at

    def exited(self, status: int, *, stopped: bool, at: str) -> None:
        self.runtime = dataclasses.replace(self.runtime, state="none")
        self.exit_code = status if status >= 0 else None
        self.state = "stopped" if stopped else ("done" if status == 0 else "failed")
        self.reported_activity = self.screen_activity = None
        self.updated_at = at

    def launch_failed(self, at: str) -> None:
        self.state = "failed"
        self.updated_at = at

    def lost(self, reason: str, at: str) -> None:
        """The daemon restarted: the record survived, its runtime did not."""
        if self.live:
            self.runtime = dataclasses.replace(self.runtime, state="lost", loss_reason=reason)
            self.reported_activity = self.screen_activity = None
            self.updated_at = at

    def touch(self, at: str) -> None:
        self.updated_at = at

    # --- persistence ----------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> Session:
        """A record read back from the state file (which this daemon wrote; a bad one is refused whole)."""
        fields = dict(data)
        fields["runtime"] = Runtime(**fields["runtime"])
        return cls(**fields)
