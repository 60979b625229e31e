"""The gateway's control protocol: its ops and the shapes of their answers.

Light on purpose (no trio, no zmq): the CLI and the updater import it to talk to gateways.
The exit codes a gateway ends with are ``shared.exit_codes``.

- ``ping`` → ``{"pong": true, "pid"}``
- ``status`` → ``{"pid", "start_time", "profile", "served_profiles", "home", "state", "code_sha",
  "code_version", "active_turns", "started_at", "supervisor", "argv", "protocol": {"min", "max"},
  "turns", "restarts"}``;
  ``served_profiles`` is every profile the answering process serves (``[profile]`` unless it is
  a multiplex gateway, which answers on each served profile's own socket, and says ``[profile]``
  while ``starting``: the set is named once every profile's socket answers, with ``running``).
  ``turns`` is ``{"finished": n, "last_seconds": float | null, "latency": {"le": [bounds in
  seconds, ascending, the last "+Inf"], "counts": [cumulative, as long], "sum": seconds}}``:
  the agent turns of this profile that finished since its process started, timed wall-clock
  from acceptance to answer (``TURN_LATENCY_BUCKETS``), ``last_seconds`` the latest one's. A cut
  turn (a drain's deadline passed, its process stopped) is not counted: its time is what the
  drain allowed, not what a turn takes. Probe turns are outside the accounting.
  ``restarts`` is ``{"total": n, "last_hour": n}``: how often this profile's gateway was
  started again, a start with a predecessor for the profile (any exit, planned or not, and a
  re-exec), whatever supervisor started it; kept in its state file across processes.
- ``turn {text, seconds?}`` → ``{"turn_id", "text", "started_at", "finished_at"}``: one agent turn
  (an echo that takes ``seconds``). While draining: error ``draining``, and nothing is started.
  With ``probe``, a synthetic turn for health: the agent's work as a turn does it, with no
  provider and no side effect, outside the turn accounting (its id is ``p<n>``, never a turn's);
  the answer adds ``"probe": true``, the ``code_sha`` it ran and ``up_for``, the seconds its
  process has run.
- ``drain {deadline, stay?}`` → ``{"finished": [turn ids], "cut": [turn ids], "accepted": n,
  "exit_code": 75 | null}`` (``accepted``: every turn the process took, t1 to tn; it takes no more);
  without ``stay`` the gateway exits 75 (planned restart) right after answering.
- ``reexec {deadline}`` → like ``drain``, then the process replaces itself with a fresh
  interpreter running the code now on disk (``exit_code`` is null; the pid stays).
  In a multiplex gateway ``drain`` and ``reexec`` on any served profile's socket drain every
  profile it serves (the answer adds ``"profiles"``): what restarts is the one process.
- ``release {deadline}`` → ``{"finished", "cut", "released": profile, "served_profiles": [the
  rest]}``: a multiplex gateway drains this one profile and lets it go (its sockets closed, its
  lock released) while it serves the others on. Error ``not_multiplex`` from a process that
  serves this profile alone.

Broadcast on ``run/gateway.pub``: topic ``state`` with ``{"state", "active_turns",
"turns_finished", "last_turn_seconds"}``, at every write of its state file, turns moving
written at most every 0.1 s (the updater's restart wakes on a fresh process's ``running``).
"""

from __future__ import annotations

from shared.errors import HermesError
from shared.protocol import Field, OpSpec, Remote


class GatewayError(HermesError, family=True):
    """A gateway: its drain, its turns, the profiles it serves, and whether it runs."""


SERVICE = "gateway"

# gateway_state values (how a gateway moves between them: services/gateway/transitions.py)
STARTING = "starting"
RUNNING = "running"
DRAINING = "draining"  # also the error code of a turn refused while draining
STOPPING = "stopping"
STOPPED = "stopped"
STARTUP_FAILED = "startup_failed"
STATES = (STARTING, RUNNING, DRAINING, STOPPING, STOPPED, STARTUP_FAILED)
STATE_TOPIC = "state"  # the events topic each of them is broadcast on

MAX_TURN_SECONDS = 300.0
# The upper bounds (seconds) of the turn-latency histogram in ``status``: 5 ms to the longest turn.
TURN_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MAX_DRAIN_SECONDS = 3600.0

PING = OpSpec("ping", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
TURN = OpSpec(
    "turn",
    {
        "text": Field(str, max_len=64 * 1024),
        "seconds": Field(float, required=False, min=0.0, max=MAX_TURN_SECONDS),
        "probe": Field(bool, required=False),
    },
    timeout=MAX_TURN_SECONDS + 5,
    remote=Remote.WITH_GRANT,
)
DRAIN = OpSpec(
    "drain",
    {"deadline": Field(float, min=0.0, max=MAX_DRAIN_SECONDS), "stay": Field(bool, required=False)},
    timeout=MAX_DRAIN_SECONDS + 5,
    remote=Remote.WITH_GRANT,
)
REEXEC = OpSpec(
    "reexec",
    {"deadline": Field(float, min=0.0, max=MAX_DRAIN_SECONDS)},
    timeout=MAX_DRAIN_SECONDS + 5,
    remote=Remote.WITH_GRANT,
)
RELEASE = OpSpec(
    "release",
    {"deadline": Field(float, min=0.0, max=MAX_DRAIN_SECONDS)},
    timeout=MAX_DRAIN_SECONDS + 5,
    remote=Remote.WITH_GRANT,
)

# Typed error codes of this service (and DRAINING, above).
NOT_MULTIPLEX = "not_multiplex"
