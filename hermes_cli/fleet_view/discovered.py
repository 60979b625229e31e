"""Rows for gateways with no socket of ours, as ``hermes gateway status`` finds them.

A watch knows a gateway by its control socket and endpoint lock, so the Hermes Agent's own
gateway, which has neither and is known by its ``gateway_state.json``, is ``down`` to it. This
stands between the watches and the board: a profile whose watch says ``down`` is surveyed
(``fleet.discovery``, that profile alone) at once and then every ``SURVEY_EVERY`` seconds while
it stays down, and shows the gateway the survey finds there; what the watch says otherwise
wins. Nothing is asked while no row is down. Only this install's rows are surveyed: another
host's gateway is never ``down`` to its watch (a lost host is ``offline``), and its files are
not here.

The survey here reads state files and does not scan ``/proc``: a scan costs tens of
milliseconds of a core, too much to repeat every few seconds, and a gateway of the Hermes Agent
writes its state file, which vouches for its process only while that process lives
(``fleet.state_record``).
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fleet import discovery
from fleet.health import UNKNOWN
from hermes_cli.fleet_view import rows
from hermes_cli.fleet_view.board import Key
from shared.errors import HermesError

SURVEY_EVERY = 2.0  # a down profile is surveyed again this often

Report = Callable[[dict[str, Any]], None]


def found_row(watched: Mapping[str, Any], record: discovery.GatewayRecord) -> dict[str, Any]:
    """The row of a gateway the survey found for a profile whose watch says ``down``."""
    return {
        **rows.blank(record.profile, watched["host"]),
        "pid": record.pid,
        "state": record.state,
        "health": {
            "state": UNKNOWN,
            "why": f"no socket of ours to ask: found by its {record.source.replace('_', ' ')}",
        },
        "code_sha": record.code_sha,
        "active_turns": record.active_turns,
        "restarts_last_hour": watched["restarts_last_hour"],
    }


class Discovered(threading.Thread):
    """Takes every watch's row (``report``) and passes on the row to show."""

    def __init__(self, root: Path, report: Report, stop_fd: int):
        super().__init__(name="discovered", daemon=True)
        self.root = root
        self._report = report
        self._stop_fd = stop_fd
        self._lock = threading.Lock()
        self._watched: dict[Key, dict[str, Any]] = {}
        self._found: dict[Key, dict[str, Any]] = {}
        self._wake_read, self._wake_write = os.pipe()  # a row that went down: survey it now
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def report(self, row: Mapping[str, Any]) -> None:
        key = (row["host"], row["profile"])
        with self._lock:
            went_down = _surveyed(row) and self._watched.get(key, {}).get("state") != rows.DOWN
            self._watched[key] = dict(row)
            if not _surveyed(row):
                self._found.pop(key, None)
            self._report(self._shown(key))
        if went_down:
            try:
                os.write(self._wake_write, b".")
            except BlockingIOError:
                pass  # woken already

    def _shown(self, key: Key) -> dict[str, Any]:
        watched = self._watched[key]
        return self._found.get(key, watched) if _surveyed(watched) else watched

    def run(self) -> None:
        while True:
            with self._lock:
                down = [key for key, row in self._watched.items() if _surveyed(row)]
            ready, _, _ = select.select([self._stop_fd, self._wake_read], [], [], SURVEY_EVERY if down else None)
            if self._stop_fd in ready:
                return
            try:
                while os.read(self._wake_read, 4096):
                    pass
            except BlockingIOError:
                pass
            with self._lock:
                down = [key for key, row in self._watched.items() if _surveyed(row)]
            if down:
                self._survey(down)

    def _survey(self, down: list[Key]) -> None:
        try:
            found = discovery.survey(self.root, scan=False, profiles=[profile for _, profile in down]).records
        except (OSError, HermesError):  # a home that cannot be read now: asked again next time
            return
        records = {}
        for record in reversed(found):  # the best-informed record of a profile comes first
            records[record.profile] = record
        with self._lock:
            for key in down:
                watched, profile = self._watched[key], key[1]
                if not _surveyed(watched):
                    continue  # its watch heard it meanwhile: what it says wins
                row = found_row(watched, records[profile]) if profile in records else None
                if row == self._found.get(key):
                    continue
                if row is None:
                    del self._found[key]
                else:
                    self._found[key] = row
                self._report(self._shown(key))

    def close(self) -> None:
        os.close(self._wake_read)
        os.close(self._wake_write)


def _surveyed(row: Mapping[str, Any]) -> bool:
    """A row of this install whose watch says ``down``: what the survey may know more of."""
    return row["state"] == rows.DOWN and row["host"] == rows.LOCAL
