"""The fleet view put together: one watch per gateway, the board they report to, the install's
facts, and a loop that shows what changed — as JSON lines, or on the terminal (``screen``)."""

from __future__ import annotations

import json
import select
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from hermes_cli.fleet_view import rows
from hermes_cli.fleet_view.board import Board, Key
from hermes_cli.fleet_view.discovered import Discovered
from hermes_cli.fleet_view.install import InstallFacts
from hermes_cli.fleet_view.watch import GatewayWatch
from shared import homes, mesh_hosts, mesh_tcp
from shared.errors import HermesError
from shared.gateways import ops

FACTS_EVERY = 2.0  # the install's files are read again this often
STOP_WAIT = 2.0  # each watch is given this long to close its sockets


class Fleet:
    """Every gateway's latest row, and the install's facts, as the watches report them."""

    def __init__(self, root: Path, min_healthy: float):
        self.root = root
        self.board = Board()
        self.facts = InstallFacts(root)
        self.discovered = Discovered(root, self.board.report, self.board.stop_fd)  # the watches report through it
        self.rows: dict[Key, dict[str, Any]] = {}
        self._watches: list[GatewayWatch] = []
        self._min_healthy = min_healthy

    def start(self) -> None:
        self.facts.refresh()
        self.discovered.start()
        for profile in _profiles(self.root):
            try:
                endpoint = homes.endpoint(homes.profile_home(profile, self.root), ops.SERVICE, create=False)
            except HermesError as exc:  # no safe socket for it: a row that says why
                row = rows.gone(rows.blank(profile, rows.LOCAL), rows.REFUSED, exc.to_dict())
                self.discovered.report(row)
                continue
            host = rows.LOCAL if endpoint.tcp is None or endpoint.tcp.is_local else endpoint.tcp.host
            self._watch(rows.blank(profile, host), endpoint)
        # Every other host's gateways, each row under its host's name.
        for endpoint in mesh_hosts.gateway_endpoints(self.root).values():
            self._watch(
                rows.blank(mesh_hosts.profile_of(endpoint.key_name), endpoint.host, own_install=False), endpoint
            )

    def _watch(self, row: dict[str, Any], endpoint: homes.Endpoint) -> None:
        self.discovered.report(row)
        watch = GatewayWatch(row, endpoint, self.discovered.report, self.board.stop_fd, self._min_healthy)
        self._watches.append(watch)
        watch.start()

    def take(self) -> list[dict[str, Any]]:
        """The rows that changed since the last call (``self.rows`` holds them all)."""
        self.rows, changed = self.board.take()
        return changed

    def ordered(self) -> list[dict[str, Any]]:
        """This host's gateways first, then each other host's; by profile within a host."""
        return sorted(
            self.rows.values(), key=lambda r: (r["host"] != rows.LOCAL, r["host"], homes.profile_order(r["profile"]))
        )

    def stop(self) -> None:
        self.board.stop()
        deadline = time.monotonic() + STOP_WAIT
        threads = [*self._watches, self.discovered]
        for thread in threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        if not any(thread.is_alive() for thread in threads):
            self.board.close()  # a watch still in a call keeps its pipes: the process ends soon
            self.discovered.close()


def _profiles(root: Path) -> list[str]:
    """The install's profiles, and each gateway its mesh names on TCP without a profile here."""
    named = homes.list_profiles(root)
    for name in mesh_tcp.configured_names(root):
        service, _, profile = name.partition("@")
        if service == ops.SERVICE and profile and profile not in named and homes.is_named_profile(profile):
            named.append(profile)
    return named


@contextmanager
def running(root: Path, min_healthy: float) -> Iterator[Fleet]:
    fleet = Fleet(root, min_healthy)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


def wait(fleet: Fleet, timeout: float, *also: int) -> list[int]:
    """Block until a row changed or one of ``also`` is readable, or ``timeout`` passes."""
    ready, _, _ = select.select([fleet.board.wake_fd, *also], [], [], timeout)
    return ready


def json_lines(fleet: Fleet, out: TextIO = sys.stdout) -> None:
    """One JSON line per change, for ever: a gateway's whole row, or the install's facts."""
    _line(out, {"type": "install", **fleet.facts.to_dict(time.time())})
    facts_due = time.monotonic() + FACTS_EVERY
    while True:
        wait(fleet, max(0.0, facts_due - time.monotonic()))
        for row in fleet.take():
            _line(out, {"type": "gateway", **rows.for_json(row, fleet.facts.sha, fleet.facts.owed)})
        if time.monotonic() >= facts_due:
            facts_due = time.monotonic() + FACTS_EVERY
            if fleet.facts.refresh():
                _line(out, {"type": "install", **fleet.facts.to_dict(time.time())})


def _line(out: TextIO, data: dict[str, Any]) -> None:
    out.write(json.dumps({"time": round(time.time(), 3), **data}, default=str) + "\n")
    out.flush()
