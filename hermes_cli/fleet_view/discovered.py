"""Rows for gateways with no socket of ours, as ``hermes gateway status`` finds them.

A watch knows a gateway by its control socket and endpoint lock, so the Hermes Agent's own
gateway, which has neither and is known by its ``gateway_state.json``, is ``down`` to it. This
stands between the watches and the board: a profile whose watch says ``down`` is surveyed
(``fleet.discovery``, that profile alone) at once and then every ``SURVEY_EVERY`` seconds while
it stays down, and shows the gateway the survey finds there; what the watch says otherwise
wins. Nothing is asked while no row is down.

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
        self._watched: dict[str, dict[str, Any]] = {}
        self._found: dict[str, dict[str, Any]] = {}
        self._wake_read, self._wake_write = os.pipe()  # a row that went down: survey it now
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def report(self, row: Mapping[str, Any]) -> None:
        profile = row["profile"]
        with self._lock:
            went_down = row["state"] == rows.DOWN and self._watched.get(profile, {}).get("state") != rows.DOWN
            self._watched[profile] = dict(row)
            if row["state"] != rows.DOWN:
                self._found.pop(profile, None)
            self._report(self._shown(profile))
        if went_down:
            try:
                os.write(self._wake_write, b".")
            except BlockingIOError:
                pass  # woken already

    def _shown(self, profile: str) -> dict[str, Any]:
        watched = self._watched[profile]
        return self._found.get(profile, watched) if watched["state"] == rows.DOWN else watched

    def run(self) -> None:
        while True:
            with self._lock:
                down = [profile for profile, row in self._watched.items() if row["state"] == rows.DOWN]
            ready, _, _ = select.select([self._stop_fd, self._wake_read], [], [], SURVEY_EVERY if down else None)
            if self._stop_fd in ready:
                return
            try:
                while os.read(self._wake_read, 4096):
                    pass
            except BlockingIOError:
                pass
            with self._lock:
                down = [profile for profile, row in self._watched.items() if row["state"] == rows.DOWN]
            if down:
                self._survey(down)

    def _survey(self, down: list[str]) -> None:
        try:
            found = discovery.survey(self.root, scan=False, profiles=down).records
        except (OSError, HermesError):  # a home that cannot be read now: asked again next time
            return
        records = {}
        for record in reversed(found):  # the best-informed record of a profile comes first
            records[record.profile] = record
        with self._lock:
            for profile in down:
                watched = self._watched[profile]
                if watched["state"] != rows.DOWN:
                    continue  # its watch heard it meanwhile: what it says wins
                row = found_row(watched, records[profile]) if profile in records else None
                if row == self._found.get(profile):
                    continue
                if row is None:
                    del self._found[profile]
                else:
                    self._found[profile] = row
                self._report(self._shown(profile))

    def close(self) -> None:
        os.close(self._wake_read)
        os.close(self._wake_write)
