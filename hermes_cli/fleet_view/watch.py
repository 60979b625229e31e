"""One gateway watched: a thread that sleeps on the gateway's own sockets and reports its row.

It subscribes to the gateway's ``state`` events (published at every write of its state) and
hears each connection to its publisher made, lost or refused:

- connected (the gateway bound its publisher: it started, or came back) → ``status``, then
  a probe turn for its health;
- lost → this host's endpoint lock says whether the process is gone (``down``); a gateway on
  another host is ``offline`` (its heartbeats stopped or its process ended: from here the two
  look the same);
- refused → ``refused``, with the typed error;
- an event → the row moves as it says; one that says ``running`` again has its health asked.

Nothing is polled: between those it sleeps on its sockets and the view's stop pipe, waking
only for a health verdict that is due (a process must run ``min_healthy`` seconds to be
judged healthy), or to ask again a gateway here that holds its lock and did not answer
(``unresponsive``: nothing else would say when it answers or dies). Every call is bounded, and one gateway's slow answer holds up no other row:
each has its own thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleet import discovery
from fleet.health import PROBE, judge
from hermes_cli.fleet_view import rows
from hermes_cli.service_client import connect
from shared.errors import HermesError
from shared.gateways import ops
from shared.homes import Endpoint
from shared.protocol import OpSpec, RemoteError
from shared.transport import NO_RETRY, Heard, Liveness, subscribe

# A gateway that comes back is found within 0.1 s, and a silent link counts as cut after 1-1.3 s:
# the view's heartbeats are its own, since an operator wants an ``offline`` row in under 2 s,
# which the mesh's defaults (tuned to spare a slow link) would not give.
LIVENESS = Liveness(reconnect=100, heartbeat=300, timeout=1000)
CALL_TIMEOUT = 1.5  # a status answer or probe turn later than this is no answer
RECHECK_HEALTH = 30.0  # a running gateway's probe turn is asked again this often
RECHECK_UNANSWERED = 1.0  # a gateway here whose lock is held and that did not answer is asked again
LOCK_SETTLE = 0.25  # how long a lost connection's process is given to let go of its lock

Report = Callable[[dict[str, Any]], None]


class GatewayWatch(threading.Thread):
    def __init__(self, row: dict[str, Any], endpoint: Endpoint, report: Report, stop_fd: int, min_healthy: float):
        super().__init__(name=f"watch {row['profile']}", daemon=True)
        self.row = row
        self.endpoint = endpoint
        self._report = report
        self._stop_fd = stop_fd
        self._min_healthy = min_healthy
        self._local = not endpoint.host and (endpoint.tcp is None or endpoint.tcp.is_local)
        self._due: float | None = None

    def run(self) -> None:
        try:
            with subscribe(self.endpoint, (ops.STATE_TOPIC,), liveness=LIVENESS) as subscriber:
                self._ask()
                while True:
                    due = self._due
                    heard = subscriber.heard(
                        None if due is None else max(0.0, due - time.monotonic()), stop_fd=self._stop_fd
                    )
                    if heard is None:
                        return
                    for item in heard:
                        self._take(item)
                    if self._due is None or time.monotonic() < self._due:
                        continue
                    if self.row["state"] == ops.RUNNING:
                        self._judge()
                    else:
                        self._ask()
        except HermesError as exc:  # no keys for a TCP gateway, a bad setting: said on its row
            self._set(rows.gone(self.row, rows.REFUSED, exc.to_dict()))

    def _take(self, item: Heard) -> None:
        if item.kind == Heard.REFUSED:
            self._set(rows.gone(self.row, rows.REFUSED, item.value.to_dict()))
            self._due = None
        elif item.kind == Heard.CONNECTED:
            self._ask()
        elif item.kind == Heard.DISCONNECTED:
            self._lost()
        elif self.row["state"] in (rows.DOWN, rows.OFFLINE, rows.REFUSED, rows.CONNECTING):
            self._ask()  # an event from a process not asked yet: who it is comes first
        else:
            was = self.row["state"]
            self._set(rows.heard(self.row, item.value))
            if self.row["state"] == ops.RUNNING and was != ops.RUNNING:
                self._judge()

    def _lost(self) -> None:
        if self._local:
            # A killed process's sockets may close a moment before its lock does: the lock is
            # given that moment to say the process is gone, before its socket is asked.
            deadline = time.monotonic() + LOCK_SETTLE
            while discovery.listening(self.endpoint) and time.monotonic() < deadline:
                time.sleep(0.01)
            self._ask()  # gone, or a publisher bound again by a process that lives on
            return
        self._set(rows.gone(self.row, rows.OFFLINE, {"code": "connection_lost"}))
        self._due = None

    def _ask(self) -> None:
        """The gateway's ``status``, and its health when it runs."""
        if self._local and not discovery.listening(self.endpoint):  # its lock here: no process holds it
            self._set(rows.gone(self.row, rows.DOWN))
            self._due = None
            return
        answer = self._call(ops.STATUS, {})
        if isinstance(answer, RemoteError):
            self._due = None
            if not self._local:
                self._set(rows.gone(self.row, rows.OFFLINE, answer.to_dict()))
            elif not discovery.listening(self.endpoint):  # it died while asked
                self._set(rows.gone(self.row, rows.DOWN))
            else:  # asked again soon: nothing else would tell when it answers or dies
                self._set(rows.unanswered_here(self.row, answer.code))
                self._due = time.monotonic() + RECHECK_UNANSWERED
            return
        if not isinstance(answer, Mapping) or answer.get("profile") != self.row["profile"]:
            self._set(rows.gone(self.row, rows.REFUSED, {"code": "not_this_gateway"}))
            self._due = None
            return
        self._set(rows.answered(self.row, answer))
        if self.row["state"] == ops.RUNNING:
            self._judge()

    def _judge(self) -> None:
        pid = self.row["pid"]
        answer = self._call(ops.TURN, PROBE)
        self._set(rows.judged(self.row, pid, judge(answer, expected_sha=None, min_healthy=self._min_healthy).to_dict()))
        up_for = answer.get("up_for") if isinstance(answer, Mapping) else None
        if isinstance(up_for, (int, float)) and up_for < self._min_healthy:  # judged again once it can be
            self._due = time.monotonic() + self._min_healthy - up_for + 0.1
        else:
            self._due = time.monotonic() + RECHECK_HEALTH

    def _call(self, spec: OpSpec, args: dict[str, Any]) -> Any:
        try:
            with connect(self.endpoint, retry=NO_RETRY) as client:
                return client.call(spec, args, timeout=CALL_TIMEOUT)
        except RemoteError as exc:
            return exc
        except HermesError as exc:  # a client that could not be made: as a refusal of its own
            return RemoteError(exc.code, exc.message, detail=exc.detail)

    def _set(self, row: dict[str, Any]) -> None:
        if row != self.row:
            self.row = row
            self._report(row)
