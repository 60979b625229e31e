"""The operator session daemon's protocol, as a mesh protocol with its own version window.

What the hook reporter, the operator plugin, the CLI and the daemon simulator share. No I/O.

- **Window.** The daemon answers ``v`` in ``3..=4``; a request outside it is refused with
  ``protocol_incompatible`` and ``{got, min, max}``. v3 is the bridged release: its requests may
  say ``runtime_id`` for ``worker_instance_id``, and its session summaries carry both
  (``simulators.operator_sim.bridge``). Every other result has one shape in both.
- **Coordinates.** Offsets, watermarks and runtime generations are canonical u64 decimal
  strings (``shared.operator.u64``). A runtime is named by the pair ``worker_instance_id`` and
  ``runtime_generation``; one without the other is refused.
- **Origin.** A caller that runs inside a managed session says so with ``origin_session_id``
  and ``origin_daemon_id``. The daemon refuses ``ORIGIN_DENIED`` and ``ORIGIN_DAEMON_ONLY``
  against that session (``plugin_self_target_denied``); ``ORIGIN_LIFECYCLE`` may target it.
- **Idempotency.** Every mutation takes an ``idempotency_key``; a client retries a mutation
  only when it carries one, and only once (``shared.operator.client``).

Ops, by name: ``host.list``, ``host.inspect``, ``project.list``, ``session.{list, get, new,
input, output, screen, wait, diff, stop, resume, remove, remove_accepting_unconfirmed, fork,
resize, rename, set_metadata, report_agent, release_agent, report_native_id}`` and ``report``,
the hook reporter's forward of one checked lifecycle report.
"""

from __future__ import annotations

from shared.errors import HermesError
from shared.protocol import Field, OpSpec, Remote

DAEMON_WINDOW = (3, 4)
CLIENT_WINDOW = (3, 4)
BRIDGED_VERSION = 3  # the release whose spelling ``runtime_id`` is still accepted and answered

ENDPOINT_ENV = "POHUNEK_DAEMON_ENDPOINT"
SESSION_ENV = "POHUNEK_SESSION_ID"
DAEMON_ID_ENV = "POHUNEK_DAEMON_ID"

STATES = ("starting", "running", "stopped", "done", "failed")
TERMINAL_STATES = frozenset({"done", "failed"})
ACTIVITIES = ("working", "blocked", "idle")
WAIT_MAX_MS = 8000
OUTPUT_MAX_BYTES = 783_240
INPUT_MAX_BYTES = 65_536
MAX_COLS = 500
MAX_ROWS = 200

ORIGIN_DENIED = frozenset({"stop", "resume", "remove", "fork", "resize", "set_metadata", "rename", "input"})
ORIGIN_DAEMON_ONLY = frozenset({"remove_accepting_unconfirmed"})
ORIGIN_LIFECYCLE = frozenset({"report_agent", "release_agent", "report_native_id"})


class OperatorError(HermesError, family=True):
    """The operator session daemon: its client, its version probe, the plugin's policy, and the
    simulator that stands in for it."""


class Code:
    """The daemon's typed answers, beside ``shared.protocol.Code``. Never rename one."""

    HOST_UNKNOWN = "host_unknown"
    HOST_UNREACHABLE = "host_unreachable"
    SESSION_NOT_FOUND = "session_not_found"
    SESSION_AMBIGUOUS = "session_ambiguous"
    SESSION_RUNTIME_CHANGED = "session_runtime_changed"
    SESSION_TERMINAL_UNAVAILABLE = "session_terminal_unavailable"
    SESSION_NOT_LIVE = "session_not_live"
    SESSION_INPUT_REJECTED = "session_input_rejected"
    SESSION_LIVE = "session_live"
    SESSION_REMOVE_UNCONFIRMED = "session_remove_unconfirmed"
    SESSION_LIMIT = "session_limit_reached"
    SESSION_NO_REPOSITORY = "session_no_repository"
    INVALID_OUTPUT_CURSOR = "invalid_output_cursor"
    WAITER_LIMIT = "session_waiter_limit_reached"
    AGENT_UNKNOWN = "agent_unknown"
    RUNTIME_NOT_INSTALLED = "runtime_not_installed"
    RUNTIME_INCOMPATIBLE = "runtime_incompatible"
    AGENT_RUNTIME_UNSUPPORTED = "agent_runtime_unsupported"
    AGENT_NOT_RESUMABLE = "agent_not_resumable"
    AGENT_FORK_UNSUPPORTED = "agent_fork_unsupported"
    PROJECT_NOT_FOUND = "project_not_found"
    PROJECT_AMBIGUOUS = "project_ambiguous"
    SELF_TARGET_DENIED = "plugin_self_target_denied"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    IDEMPOTENCY_IN_FLIGHT = "idempotency_in_flight"
    IDEMPOTENCY_TABLE_FULL = "idempotency_table_full"
    DAEMON_FAILING = "daemon_failing"


def _str(max_len: int = 128, *, required: bool = True) -> Field:
    return Field(str, required=required, max_len=max_len)


_HOST = {"host": _str(253)}
_TARGET = {**_HOST, "session": _str()}
_RUNTIME = {
    "worker_instance_id": _str(required=False),
    "runtime_generation": _str(20, required=False),
    "runtime_id": _str(required=False),  # v3 only: the old spelling of worker_instance_id
}
_ORIGIN = {"origin_session_id": _str(required=False), "origin_daemon_id": _str(required=False)}
_MUTATION = {**_TARGET, **_ORIGIN, "idempotency_key": _str(required=False)}
_GEOMETRY = {"cols": Field(int, min=1, max=MAX_COLS), "rows": Field(int, min=1, max=MAX_ROWS)}
_METADATA = Field(dict, max_len=32)
_LIFECYCLE = {
    "session": _str(),
    "pid": Field(int, min=1, max=2**31),
    "start_time": Field(int, min=0),
    **_ORIGIN,
}


def _read(name: str, fields: dict[str, Field], timeout: float = 10.0) -> OpSpec:
    return OpSpec(name, fields, idempotent=True, timeout=timeout, remote=Remote.ALLOWED)


def _mutation(name: str, fields: dict[str, Field] | None = None, timeout: float = 15.0) -> OpSpec:
    return OpSpec(name, {**_MUTATION, **(fields or {})}, timeout=timeout, remote=Remote.WITH_GRANT)


HOST_LIST = _read("host.list", {})
HOST_INSPECT = _read("host.inspect", _HOST)
PROJECT_LIST = _read("project.list", _HOST)
SESSION_LIST = _read("session.list", {**_HOST, "name": _str(required=False)})
SESSION_GET = _read("session.get", {**_TARGET, **_ORIGIN})
SESSION_OUTPUT = _read(
    "session.output",
    {
        **_TARGET,
        **_RUNTIME,
        **_ORIGIN,
        "after_offset": _str(20, required=False),
        "max_bytes": Field(int, required=False, min=1, max=OUTPUT_MAX_BYTES),
        "wait_ms": Field(int, required=False, min=0, max=WAIT_MAX_MS),
    },
    timeout=15.0,
)
SESSION_SCREEN = _read("session.screen", {**_TARGET, **_RUNTIME, **_ORIGIN})
SESSION_WAIT = _read(
    "session.wait",
    {
        **_TARGET,
        **_RUNTIME,
        **_ORIGIN,
        "after_updated_at": _str(40, required=False),
        "after_terminal_watermark": _str(20, required=False),
        "after_output_offset": _str(20, required=False),
        "states": Field(list, required=False, max_len=len(STATES)),
        "activities": Field(list, required=False, max_len=len(ACTIVITIES)),
        "timeout_ms": Field(int),  # 1..=8000, checked with the rest of the wait's rules
    },
    timeout=15.0,
)
SESSION_DIFF = _read(
    "session.diff", {**_TARGET, **_ORIGIN, "max_bytes": Field(int, required=False, min=1, max=OUTPUT_MAX_BYTES)}
)

# The one permitted start: never retried by a client, whatever key it carries.
SESSION_NEW = OpSpec(
    "session.new",
    {
        **_HOST,
        **_ORIGIN,
        "agent": _str(64),
        "name": _str(required=False),
        "project": _str(256, required=False),
        "branch": _str(200, required=False),
        "base_branch": _str(200, required=False),
        "cols": Field(int, required=False, min=1, max=MAX_COLS),
        "rows": Field(int, required=False, min=1, max=MAX_ROWS),
        "input": Field(str, required=False, max_len=INPUT_MAX_BYTES),
        "metadata": Field(dict, required=False, max_len=32),
        "idempotency_key": _str(required=False),
    },
    timeout=60.0,
    remote=Remote.WITH_GRANT,
)
SESSION_INPUT = _mutation(
    "session.input", {**_RUNTIME, "text": Field(str, max_len=INPUT_MAX_BYTES), "submit": Field(bool, required=False)}
)
SESSION_STOP = _mutation("session.stop", timeout=30.0)
SESSION_RESUME = _mutation(
    "session.resume",
    {
        "cols": Field(int, required=False, min=1, max=MAX_COLS),
        "rows": Field(int, required=False, min=1, max=MAX_ROWS),
    },
    timeout=60.0,
)
SESSION_REMOVE = _mutation("session.remove", timeout=30.0)
SESSION_REMOVE_ACCEPTING_UNCONFIRMED = _mutation("session.remove_accepting_unconfirmed", timeout=30.0)
SESSION_FORK = _mutation("session.fork", {"name": _str(required=False)}, timeout=60.0)
SESSION_RESIZE = _mutation("session.resize", _GEOMETRY)
SESSION_RENAME = _mutation("session.rename", {"name": _str()})
SESSION_SET_METADATA = _mutation("session.set_metadata", {"metadata": _METADATA})

SESSION_REPORT_AGENT = OpSpec(
    "session.report_agent",
    {**_LIFECYCLE, "activity": Field(str, choices=frozenset({"working", "idle", "blocked"}))},
    remote=Remote.WITH_GRANT,
)
SESSION_RELEASE_AGENT = OpSpec("session.release_agent", {**_LIFECYCLE, "reason": _str(32)}, remote=Remote.WITH_GRANT)
SESSION_REPORT_NATIVE_ID = OpSpec(
    "session.report_native_id", {**_LIFECYCLE, "native_id": _str(), "resumed": Field(bool)}, remote=Remote.WITH_GRANT
)

# One checked, payload-free lifecycle report (``shared.hook_reports.Report.to_wire``), as the hook
# reporter forwards it; the daemon files it as the matching lifecycle op. Any error answer counts
# as not delivered.
REPORT = OpSpec("report", {"report": Field(dict, max_len=32)}, timeout=10.0, remote=Remote.WITH_GRANT)

# By name: a mutation's spec carries a dict of fields, so it cannot be a set member itself.
MUTATIONS = frozenset(
    spec.name
    for spec in (
        SESSION_INPUT,
        SESSION_STOP,
        SESSION_RESUME,
        SESSION_REMOVE,
        SESSION_REMOVE_ACCEPTING_UNCONFIRMED,
        SESSION_FORK,
        SESSION_RESIZE,
        SESSION_RENAME,
        SESSION_SET_METADATA,
    )
)


def method(spec: OpSpec | str) -> str:
    """The method's short name, as the origin tables spell it: ``session.stop`` -> ``stop``."""
    name = spec if isinstance(spec, str) else spec.name
    return name.rpartition(".")[2]
