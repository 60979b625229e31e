"""Every gateway of one install (a root home and its ``profiles/<name>``).

Each profile's control socket is asked first: a live gateway answers for itself. A gateway
that cannot answer (stopped, wedged, mid-start) is found through its state file, trusted only
while the process it names is alive with the same start time. A process scan comes last, for
old or crashed gateways whose socket and state file are gone; it classifies processes only by
``looks_like_gateway_command_line`` on the full argv and judges ownership by the home the
process runs on, so a gateway of another install is never taken for ours.

No trio here: the CLI imports this module, and psutil is imported only when a scan runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shared import homes
from shared.command_lines import looks_like_gateway_command_line
from shared.curve import client_options
from shared.files import StateFileCorrupt, read_json
from shared.gateways import ops
from shared.identity import ProcessIdentity, is_alive, process_identity
from shared.layout import GATEWAY_STATE_FILE
from shared.locks import probe
from shared.protocol import RemoteError
from shared.supervisors import detect_supervisor
from shared.sync_client import call_all

Source = Literal["socket", "state_file", "scan"]

UNKNOWN = "unknown"
# States in which a state file may describe a process that is still a gateway.
LIVE_STATES = frozenset({ops.STARTING, ops.RUNNING, ops.DRAINING, ops.STOPPING})


@dataclass(frozen=True)
class GatewayRecord:
    profile: str
    pid: int
    start_time: int | None
    state: str
    code_sha: str | None
    code_version: str | None
    active_turns: int | None
    supervisor: str
    source: Source
    home: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "pid": self.pid,
            "start_time": self.start_time,
            "state": self.state,
            "code_sha": self.code_sha,
            "code_version": self.code_version,
            "active_turns": self.active_turns,
            "supervisor": self.supervisor,
            "source": self.source,
            "home": str(self.home),
        }


def discover(root: Path, *, timeout: float = 1.0, scan: bool = True) -> list[GatewayRecord]:
    """The gateways of the install at ``root``, default profile first, then by profile name."""
    root = Path(root).absolute()
    profile_homes = {name: homes.profile_home(name, root) for name in homes.list_profiles(root)}
    answers = _ask_all(profile_homes, timeout)
    found = [
        record
        for name, home in profile_homes.items()
        if (record := _from_answer(name, home, answers.get(name)) or _from_state_file(name, home))
    ]
    if scan:
        known = {r.pid for r in found}
        found += [r for r in scan_gateways(root) if r.pid not in known]
    return sorted(found, key=_order)


_SOURCE_RANK = {"socket": 0, "state_file": 1, "scan": 2}


def _order(record: GatewayRecord) -> tuple[bool, str, int, int]:
    # Within a profile the best-informed record comes first.
    return record.profile != homes.DEFAULT_PROFILE, record.profile, _SOURCE_RANK[record.source], record.pid


def _ask_all(profile_homes: Mapping[str, Path], timeout: float) -> dict[str, Any]:
    """STATUS from every profile's gateway at once; profile -> answer (or RemoteError)."""
    addresses: dict[str, str] = {}
    options: dict[str, Any] = {}
    for name, home in profile_homes.items():
        try:
            endpoint = homes.endpoint(home, ops.SERVICE, create=False)
        except homes.EndpointPathTooLong:
            continue
        # A gateway holds its endpoint lock while it lives. A socket file left by a killed one
        # would make the client wait out its whole timeout for nobody; the lock says so at once.
        if _lock_held(endpoint.lock_path):
            addresses[name] = endpoint.control
            options[endpoint.control] = client_options(endpoint)
    outcomes = call_all(list(addresses.values()), ops.STATUS, timeout=timeout, options=options)
    return {name: outcomes.get(address) for name, address in addresses.items()}


def _from_answer(profile: str, home: Path, answer: Any) -> GatewayRecord | None:
    if isinstance(answer, RemoteError):
        return None  # unavailable, timed out, or refused: it did not answer
    # A fallback socket dir is keyed by a digest; make sure it is this home's gateway that spoke.
    if not isinstance(answer, dict) or not _same_path(answer.get("home"), home):
        return None
    ident = _state_identity(answer)
    if ident is None:
        return None
    return GatewayRecord(
        profile=profile,
        pid=ident.pid,
        start_time=ident.start_time,
        state=str(answer.get("state", UNKNOWN)),
        code_sha=answer.get("code_sha"),
        code_version=answer.get("code_version"),
        active_turns=answer.get("active_turns"),
        supervisor=str(answer.get("supervisor", UNKNOWN)),
        source="socket",
        home=home,
    )


def _lock_held(path: Path) -> bool:
    try:
        return probe(path).held
    except OSError:
        return True  # cannot tell (a symlink, no permission): let the socket answer for itself


def _read_state(home: Path) -> dict[str, Any] | None:
    try:
        return read_json(home / GATEWAY_STATE_FILE, default=None)
    except (StateFileCorrupt, OSError):
        return None


def _state_identity(state: Mapping[str, Any]) -> ProcessIdentity | None:
    try:
        return ProcessIdentity.from_dict(state)
    except ValueError:
        return None


def _from_state_file(profile: str, home: Path) -> GatewayRecord | None:
    state = _read_state(home)
    if state is None or state.get("gateway_state") not in LIVE_STATES:
        return None
    ident = _state_identity(state)
    if ident is None or not is_alive(ident):
        return None
    return _record_from_state(profile, home, ident, state, source="state_file")


def _record_from_state(
    profile: str,
    home: Path,
    ident: ProcessIdentity,
    state: Mapping[str, Any],
    *,
    source: Source,
    supervisor: str | None = None,
) -> GatewayRecord:
    return GatewayRecord(
        profile=profile,
        pid=ident.pid,
        start_time=ident.start_time,
        state=str(state.get("gateway_state", UNKNOWN)),
        code_sha=state.get("code_sha"),
        code_version=state.get("code_version"),
        active_turns=state.get("active_turns"),
        supervisor=supervisor or str(state.get("supervisor", UNKNOWN)),
        source=source,
        home=home,
    )


def _same_path(a: object, b: Path) -> bool:
    return isinstance(a, str) and bool(a) and os.path.realpath(a) == os.path.realpath(b)


# --- the process scan --------------------------------------------------------------------------


def scan_gateways(root: Path) -> list[GatewayRecord]:
    """Gateway processes running on ``root`` or one of its profiles, found by a full process scan."""
    root = Path(root).absolute()
    real_root = os.path.realpath(root)
    # Which profile a pid serves, from state files naming that very process: a gateway started
    # with --profile runs under the root's HERMES_HOME, so its environment alone cannot say.
    by_identity = _state_files_by_identity(root)
    records = [
        record
        for pid, environ in _gateway_processes()
        if os.path.realpath(homes.root_home(environ)) == real_root  # another install's is never ours
        and (record := _scanned_record(root, pid, environ, by_identity)) is not None
    ]
    return sorted(records, key=_order)


def scan_foreign(root: Path) -> list[dict[str, Any]]:
    """Gateway processes of OTHER homes on this machine: named in a plan, never touched.

    Judged by the home each process actually runs on (its live environment), so a sibling
    install on the same account is told apart from ours whatever its command line says."""
    real_root = os.path.realpath(Path(root).absolute())
    foreign = []
    for pid, environ in _gateway_processes():
        other = homes.root_home(environ)
        if os.path.realpath(other) != real_root:
            foreign.append(
                {
                    "kind": "process",
                    "name": f"pid {pid}",
                    "pid": pid,
                    "home": str(homes.active_home(environ)),
                    "root": str(other),
                }
            )
    return foreign


def _gateway_processes() -> Iterator[tuple[int, dict[str, str]]]:
    """(pid, environment) of every process the canonical matcher calls a gateway; no ancestor
    of ours is left out (an update run from inside a gateway must still see that gateway)."""
    import psutil  # lazy: `hermes gateway status` only pays for it when the scan runs

    # environ is read only for gateway-shaped processes: it is the expensive part of a scan.
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline")
        if not cmdline or not looks_like_gateway_command_line(cmdline):
            continue
        try:
            yield proc.pid, proc.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue


def _state_files_by_identity(root: Path) -> dict[ProcessIdentity, tuple[str, dict[str, Any]]]:
    states: dict[ProcessIdentity, tuple[str, dict[str, Any]]] = {}
    for profile in homes.list_profiles(root):
        state = _read_state(homes.profile_home(profile, root))
        if not state:
            continue
        ident = _state_identity(state)
        if ident is not None:
            states[ident] = (profile, state)
    return states


def _scanned_record(
    root: Path, pid: int, environ: Mapping[str, str], by_identity: Mapping[ProcessIdentity, tuple[str, dict[str, Any]]]
) -> GatewayRecord | None:
    ident = process_identity(pid)
    if ident is None:
        return None  # exited since the scan saw it
    supervisor = detect_supervisor(dict(environ))
    if ident in by_identity:
        profile, state = by_identity[ident]
        return _record_from_state(
            profile, homes.profile_home(profile, root), ident, state, source="scan", supervisor=supervisor
        )
    profile = homes.active_profile(environ)
    return GatewayRecord(
        profile=profile,
        pid=pid,
        start_time=ident.start_time,
        state=UNKNOWN,
        code_sha=None,
        code_version=None,
        active_turns=None,
        supervisor=supervisor,
        source="scan",
        home=homes.profile_home(profile, root),
    )
