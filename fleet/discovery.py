"""Every gateway of one install (a root home and its ``profiles/<name>``).

Each profile's control socket is asked first: a live gateway answers for itself, and is
taken by what it says it is (the install id and profile of ``shared.ids``), not by the pid
and home it reports, which a container gives its own. A gateway from before the ids is taken
by the home it reports. A gateway that cannot answer (stopped, wedged, mid-start) is found
through its state file, trusted only while the process it names is alive with the same start
time and is that gateway (``state_record.names_live_gateway``: its command line, or, when that
cannot be read, the record's ``kind`` and argv, as the Hermes Agent's readers judge a record
its gateway wrote; so a file the Hermes Agent wrote reads here too). A process scan comes last, for old or crashed gateways whose socket and state file are
gone; it runs only when some profile had no answer, or a gateway answered from another pid
namespace (``_scan_can_add``). It classifies processes only by ``looks_like_gateway_command_line`` on the full argv;
a process is ours when a state file of ours names it (as it names itself: its own pid
namespace's pid, and its start time) or when it runs on our root home, so a gateway of
another install is never taken for ours. No gateway is listed twice: one that answered, or
that a state file vouches for, is not listed again by the scan under its host pid.

A multiplex gateway (one process serving several profiles) is listed once per profile it
serves, each record carrying the whole set: by each profile's socket or state file, or by the
scan, from the state files naming the process, else from its command line
(``gateway_served_profiles``) when none does.

A gateway asked over TCP that gave no answer is ``Unreached``: its profile and the typed error,
for ``survey`` to report beside the gateways that answered. Its state is ``refused`` when its
socket refused this client's CURVE handshake (``auth_failed``, ``server_key_mismatch``,
``handshake_failed``), ``offline`` when it could not be reached within the bound (no connection
made, or one lost: ``protocol.UNANSWERED``), as a gateway on a host that is down or cut off.

``survey`` also asks, when given them, the gateways of the other hosts this home names
(``shared.mesh_hosts``), in the same call as this install's: each answer is that host's gateway,
vouched for by the server key this home trusts for it, and each record and unreached socket
carries its ``host`` ("" for this install's). Only their sockets tell of them: no state file or
process of theirs is here.

No trio here: the CLI imports this module. The scan reads ``/proc`` (``shared.identity``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from fleet import state_record
from fleet.command_lines import gateway_served_profiles, looks_like_gateway_command_line
from shared import homes, ids, mesh_hosts, transport
from shared.endpoint_lock import lock_says
from shared.errors import HermesError
from shared.files import StateFileCorrupt, read_json
from shared.gateways import ops
from shared.identity import (
    ProcessIdentity,
    all_pids,
    is_alive,
    own_pid,
    process_identity,
    read_cmdline,
    read_environ,
)
from shared.layout import GATEWAY_STATE_FILE
from shared.protocol import UNANSWERED, Code, OpSpec, RemoteError
from shared.transport import HANDSHAKE_REFUSALS

Source = Literal["socket", "state_file", "scan"]

UNKNOWN = "unknown"
REFUSED = "refused"  # the state of a gateway known only by its refused handshake
OFFLINE = "offline"  # the state of a TCP gateway known only by its socket, which did not answer
# States in which a state file may describe a process that is still a gateway.
LIVE_STATES = frozenset({ops.STARTING, ops.RUNNING, ops.DRAINING, ops.STOPPING})


class GatewayRecord(NamedTuple):
    profile: str
    pid: int  # on this host when it can see the process, else as the gateway reports it
    start_time: int | None
    state: str
    code_sha: str | None
    code_version: str | None
    active_turns: int | None
    supervisor: str
    source: Source
    home: Path  # the profile's home as this install names it, wherever the gateway mounts it
    install_id: str | None = None  # None: a gateway from before the ids, or one found by the scan
    instance_id: str | None = None
    # Every profile its process serves: this one alone, or the set of a multiplex gateway.
    served_profiles: tuple[str, ...] = ()
    host: str = ""  # the other host it runs on (``shared.mesh_hosts``); "" for this install's

    @property
    def multiplex(self) -> bool:
        """Whether one process serves this profile and others (they share its pid)."""
        return len(self.served_profiles) > 1

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
            "install_id": self.install_id,
            "instance_id": self.instance_id,
            "served_profiles": list(self.served_profiles or (self.profile,)),
            "multiplex": self.multiplex,
            "host": self.host,
        }

    def _self_identity(self) -> ProcessIdentity | None:
        # The (pid, start time) the gateway gave, or read from a process in its namespace.
        return None if self.start_time is None else ProcessIdentity(self.pid, self.start_time)


class Unreached(NamedTuple):
    """A profile's gateway socket, asked over TCP, that gave no answer. ``refused``: something
    serves there, but this install cannot ask it (its client key unknown there, a server key
    this install does not trust for it, not a CURVE service), or, for another host's gateway,
    this home cannot (no key here to trust it by) or it did not answer as that gateway.
    ``offline``: no connection was made or kept within the bound (its host down, cut off, or
    not serving there)."""

    profile: str
    home: Path
    error: RemoteError
    host: str = ""  # as ``GatewayRecord.host``

    @property
    def state(self) -> str:
        return OFFLINE if self.error.code in UNANSWERED else REFUSED

    def to_dict(self) -> dict[str, Any]:
        """The gateway row it makes: the keys of ``GatewayRecord.to_dict``, what the socket
        did not tell None, and the typed error."""
        return {
            "profile": self.profile,
            "pid": None,
            "start_time": None,
            "state": self.state,
            "code_sha": None,
            "code_version": None,
            "active_turns": None,
            "supervisor": UNKNOWN,
            "source": "socket",
            "home": None if self.host else str(self.home),  # another host's is not known here
            "install_id": None,
            "instance_id": None,
            "served_profiles": [self.profile],
            "multiplex": False,
            "host": self.host,
            "error": {"code": self.error.code, "message": self.error.message},
        }


class Survey(NamedTuple):
    records: list[GatewayRecord]  # this install's first, then each host's, as the hosts are given
    unreached: list[Unreached]  # by host and profile, as the records are


def discover(
    root: Path, *, timeout: float = 1.0, scan: bool = True, sockets: dict[str, Any] | None = None
) -> list[GatewayRecord]:
    """The gateways of the install at ``root``, default profile first, then by profile name.

    ``sockets`` (see ``shared.transport.sync_client.call_all``) keeps the connections to the gateways
    open for the caller's next call to them; the caller closes them."""
    return survey(root, timeout=timeout, scan=scan, sockets=sockets).records


def survey(
    root: Path,
    *,
    timeout: float = 1.0,
    scan: bool = True,
    sockets: dict[str, Any] | None = None,
    profiles: Collection[str] | None = None,
    remote: Mapping[str, homes.Endpoint] | None = None,
) -> Survey:
    """``discover``'s gateways, and the profiles whose gateway, asked over TCP, refused the
    handshake or could not be reached. Such a gateway may still be listed, by its state file
    or the scan, when its home is here. ``profiles`` narrows it to those of the install's
    profiles (None: all of them); the scan, when it runs, may still list others.

    ``remote`` (``mesh_hosts.gateway_endpoints``: qualified profile -> endpoint) adds other
    hosts' gateways, asked in the same call within the same ``timeout``: each that answered a
    record, each that did not an ``Unreached``."""
    root = Path(root).absolute()
    names = [name for name in homes.list_profiles(root) if profiles is None or name in profiles]
    profile_homes = {name: homes.profile_home(name, root) for name in names}
    answers, vouched = ask_gateways(profile_homes, ops.STATUS, timeout=timeout, sockets=sockets, remote=remote)
    install = _install_id(root)  # read after the answers: a gateway makes it before it binds
    found: list[GatewayRecord] = []
    unreached = [
        Unreached(name, home, answer)
        for name, home in profile_homes.items()
        if name in vouched
        and isinstance(answer := answers.get(name), RemoteError)
        and answer.code in HANDSHAKE_REFUSALS | UNANSWERED
    ]
    seen: set[object] = set()
    for name, home in profile_homes.items():
        answer = answers.get(name)
        record = _from_answer(name, home, answer, install, vouched=name in vouched) or _from_state_file(
            name, home, install
        )
        # One gateway behind two profile paths (a symlinked profile) is listed once; a multiplex
        # gateway is listed once for each home it serves.
        if record is not None and (key := _record_key(record)) not in seen:
            seen.add(key)
            found.append(record)
    if scan and _scan_can_add(profile_homes, found):
        found = _with_scan(root, found)
    on_hosts, off_hosts = _of_hosts(remote or {}, answers)
    return Survey(
        sorted(found, key=_order) + on_hosts,
        sorted(unreached, key=lambda u: homes.profile_order(u.profile)) + off_hosts,
    )


def _of_hosts(
    remote: Mapping[str, homes.Endpoint], answers: Mapping[str, Any]
) -> tuple[list[GatewayRecord], list[Unreached]]:
    """Other hosts' gateways as their answers tell: a record for each that answered as the
    profile its key was trusted for, an ``Unreached`` for every other (its socket is all this
    home knows of it)."""
    found: list[GatewayRecord] = []
    unreached: list[Unreached] = []
    for name, endpoint in remote.items():
        profile = mesh_hosts.profile_of(endpoint.key_name)
        answer = answers.get(name)
        said = answer.get("home") if isinstance(answer, dict) else None
        home = Path(said) if isinstance(said, str) and said else Path()
        record = _from_answer(profile, home, answer, None, vouched=True, host=endpoint.host)
        if record is not None:
            found.append(record)
        elif isinstance(answer, RemoteError):
            unreached.append(Unreached(profile, home, answer, endpoint.host))
        else:
            wrong = RemoteError(Code.MALFORMED_REPLY, f"{endpoint.control} did not answer as gateway {name}")
            unreached.append(Unreached(profile, home, wrong, endpoint.host))
    return found, unreached


def _scan_can_add(profiles: Mapping[str, Path], found: list[GatewayRecord]) -> bool:
    """Whether the process scan may find more than the sockets did: when a gateway that
    answered is not that process here (it runs in its own pid namespace, and only the scan tells
    its pid on this host), when one is known by its state file alone (the scan has its host pid
    and command line), or when a profile with neither answer nor state file may still run one:
    its endpoint lock is held (a gateway hung or starting, whose socket or state file is gone
    or not made yet) or cannot be read here. A profile with none of these runs no gateway of
    this mesh, and a scan could only repeat what the sockets said."""
    answered = [record for record in found if record.source == "socket"]
    if not all((ident := record._self_identity()) is not None and is_alive(ident) for record in answered):
        return True
    if any(record.source != "socket" for record in found):
        return True
    listed = {record.profile for record in found}
    return any(_may_run_unseen(home) for name, home in profiles.items() if name not in listed)


def _may_run_unseen(home: Path) -> bool:
    """Whether a gateway may run for the profile at ``home`` that neither its socket nor its
    state file showed: its endpoint lock is held, or nothing here can tell."""
    try:
        endpoint = homes.endpoint(home, ops.SERVICE, create=False)
    except (homes.EndpointPathTooLong, homes.UnsafeRunDir):
        return True
    return lock_says(endpoint) is not False


def _record_key(record: GatewayRecord) -> tuple[object, object]:
    return record.instance_id or record._self_identity(), _same_directory(record.home)


def _same_directory(home: Path) -> object:
    """What two spellings of one directory share: its device and inode (one stat, where a
    realpath costs one per component), or its real path when it cannot be read."""
    try:
        found = os.stat(home)
    except OSError:
        return os.path.realpath(home)
    return found.st_dev, found.st_ino


_SOURCE_RANK = {"socket": 0, "state_file": 1, "scan": 2}


def _order(record: GatewayRecord) -> tuple[bool, str, int, int]:
    # Within a profile the best-informed record comes first.
    return *homes.profile_order(record.profile), _SOURCE_RANK[record.source], record.pid


def _install_id(root: Path) -> str | None:
    try:
        return ids.read_install_id(root)
    except ids.InstallIdCorrupt:
        return None  # no gateway can prove it is ours by id: the ones from before the ids still can


def ask_gateways(
    profile_homes: Mapping[str, Path],
    spec: OpSpec,
    args: Mapping[str, Any] | None = None,
    *,
    timeout: float,
    sockets: dict[str, Any] | None = None,
    remote: Mapping[str, homes.Endpoint] | None = None,
) -> tuple[dict[str, Any], set[str]]:
    """One call of ``spec`` to every profile's gateway at once: profile -> answer (or the typed
    error it ended with; a profile with no socket to ask is left out), and the profiles asked
    over CURVE, whose server key proved which gateway answered. ``remote``'s endpoints (other
    hosts' gateways, by qualified profile, which no profile here is spelled as) are asked in
    the same call, their answers under the same names."""
    endpoints: dict[str, homes.Endpoint] = {}
    for name, home in profile_homes.items():
        try:
            endpoint = homes.endpoint(home, ops.SERVICE, create=False)
        except (homes.EndpointPathTooLong, homes.UnsafeRunDir):
            continue  # no socket it could be asked on, or none that can be trusted: not asked
        if listening(endpoint):
            endpoints[name] = endpoint
    endpoints.update(remote or {})
    vouched = {name for name, endpoint in endpoints.items() if endpoint.tcp is not None}
    if not vouched and sockets is None:
        outcomes = transport.call_all_ipc([e.control for e in endpoints.values()], spec, args, timeout=timeout)
        return {name: outcomes.get(endpoint.control) for name, endpoint in endpoints.items()}, vouched
    from shared.transport import curve  # pyzmq comes with it: only for TCP, or kept connections

    options: dict[str, Any] = {}
    unasked: dict[str, RemoteError] = {}
    for name, endpoint in endpoints.items():
        try:
            options[endpoint.control] = curve.client_options(endpoint)
        except HermesError as exc:
            if not endpoint.host:
                raise
            # One host's keys missing or unsafe is that host's row, not the end of every view.
            unasked[name] = RemoteError(exc.code, exc.message, detail=exc.detail)
    asked = {name: endpoint for name, endpoint in endpoints.items() if name not in unasked}
    outcomes = transport.call_all(
        [e.control for e in asked.values()], spec, args, timeout=timeout, options=options, probe=False, sockets=sockets
    )
    return {**{name: outcomes.get(endpoint.control) for name, endpoint in asked.items()}, **unasked}, vouched


def listening(endpoint: homes.Endpoint) -> bool:
    """Whether a gateway may answer at ``endpoint``, known without waking any gateway up.

    No socket file: nobody to ask. A socket file left by a killed gateway would make the client
    wait out its whole timeout for nobody; the endpoint lock, which a gateway holds while it
    lives and the kernel drops when it dies, says so at once. Where the lock here cannot tell
    (a TCP gateway on another host, or in a container whose home is out of sight), it is asked."""
    if endpoint.tcp is None and not os.path.exists(endpoint.control[len("ipc://") :]):
        return False
    return lock_says(endpoint) is not False


def _speaks_for(
    profile: str, home: Path, said: Mapping[str, Any], install: str | None, *, vouched: bool = False
) -> bool:
    """Whether a gateway's own account of itself (``install_id``, ``profile``, ``home``) is this
    profile's gateway: by the install id and profile it gives; by the home it runs on when it
    gives no install id (it is from before the ids) or ours cannot be read. An answer over
    CURVE (``vouched``) came from the server whose key this install trusts for that gateway:
    the key is the proof, and a gateway on another host belongs to an install of its own."""
    if vouched:
        return said.get("profile") == profile
    if said.get("install_id") is None or install is None:
        return _same_path(said.get("home"), home)
    return said.get("install_id") == install and said.get("profile") == profile


def _from_answer(
    profile: str, home: Path, answer: Any, install: str | None, *, vouched: bool, host: str = ""
) -> GatewayRecord | None:
    if not isinstance(answer, dict):
        return None  # unavailable, timed out, refused, or broke the wire: it did not answer
    if not _speaks_for(profile, home, answer, install, vouched=vouched):
        return None  # a socket of ours answered by another install's or profile's gateway
    ident = state_record.identity(answer)
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
        install_id=_an_id(answer.get("install_id")),
        instance_id=_an_id(answer.get("instance_id")),
        served_profiles=served_profiles(profile, answer.get("served_profiles")),
        host=host,
    )


def served_profiles(profile: str, said: object) -> tuple[str, ...]:
    """The profiles a gateway says its process serves, as told (answer or state file): kept
    only when it is a set ``homes.parse_served`` accepts that includes ``profile``; else
    ``profile`` alone, which is what every gateway from before multiplexing serves."""
    if isinstance(said, list) and profile in said and all(isinstance(name, str) and "," not in name for name in said):
        try:
            return homes.parse_served(",".join(said))
        except HermesError:
            pass
    return (profile,)


def _an_id(value: object) -> str | None:
    return value if ids.is_id(value) else None  # type: ignore[return-value]


def _read_state(home: Path) -> dict[str, Any] | None:
    try:
        return read_json(home / GATEWAY_STATE_FILE, default=None)
    except (StateFileCorrupt, OSError):
        return None


def _from_state_file(profile: str, home: Path, install: str | None) -> GatewayRecord | None:
    state = _read_state(home)
    if state is None or state.get("gateway_state") not in LIVE_STATES:
        return None
    said = {"install_id": state.get("install_id"), "profile": state.get("profile"), "home": state.get("hermes_home")}
    if said["install_id"] is not None and not _speaks_for(profile, home, said, install):
        return None  # written through a symlinked profile by another profile's gateway
    ident = state_record.identity(state)
    if ident is None or not state_record.names_live_gateway(state):
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
        active_turns=state_record.active_turns(state),
        supervisor=supervisor or str(state.get("supervisor", UNKNOWN)),
        source=source,
        home=home,
        install_id=_an_id(state.get("install_id")),
        instance_id=_an_id(state.get("instance_id")),
        served_profiles=served_profiles(profile, state.get("served_profiles")),
    )


def _same_path(a: object, b: Path) -> bool:
    return isinstance(a, str) and bool(a) and os.path.realpath(a) == os.path.realpath(b)


# --- the process scan --------------------------------------------------------------------------


def _with_scan(root: Path, found: list[GatewayRecord]) -> list[GatewayRecord]:
    return merge_scanned(found, _scan(root))


def merge_scanned(
    found: list[GatewayRecord], scanned: list[tuple[ProcessIdentity, GatewayRecord]]
) -> list[GatewayRecord]:
    """``found`` and the scanned gateways that are none of them. A found gateway is known to the
    scan by the identity it gave (its own pid namespace's pid and its start time); the scan
    tells its pid on this host, which its record then carries. A multiplex process found for
    some of its profiles still brings the scan's records of the others."""
    host_pids = {ident: record.pid for ident, record in scanned}
    known = {r._self_identity() for r in found}
    known_profiles = {(r._self_identity(), r.profile) for r in found}
    merged = [r._replace(pid=host_pids[ident]) if (ident := r._self_identity()) in host_pids else r for r in found]
    return merged + [
        record
        for ident, record in scanned
        if ident not in known or (record.multiplex and (ident, record.profile) not in known_profiles)
    ]


def scan_gateways(root: Path) -> list[GatewayRecord]:
    """Gateway processes of the install at ``root``, found by a full process scan, by host pid."""
    return sorted((record for _, record in _scan(Path(root).absolute())), key=_order)


def scan_foreign(root: Path) -> list[dict[str, Any]]:
    """Gateway processes of OTHER homes on this machine: named in a plan, never touched.

    Judged as the scan judges ours (a state file of ours naming the process, or the home it
    actually runs on: its live environment), so a sibling install on the same account is told
    apart from ours whatever its command line says."""
    root = Path(root).absolute()
    real_root = os.path.realpath(root)
    ours = _state_files_by_identity(root)
    foreign = []
    for seen in _gateway_processes():
        other = homes.root_home(seen.environ)
        if seen.self_identity not in ours and os.path.realpath(other) != real_root:
            foreign.append(
                {
                    "kind": "process",
                    "name": f"pid {seen.pid}",
                    "pid": seen.pid,
                    "home": str(homes.active_home(seen.environ)),
                    "root": str(other),
                }
            )
    return foreign


class _Seen(NamedTuple):
    pid: int  # on this host
    self_identity: ProcessIdentity  # as the process knows itself, in its own pid namespace
    environ: dict[str, str]
    served: tuple[str, ...] | None  # the set its command line serves, for a multiplex gateway


def _gateway_processes() -> Iterator[_Seen]:
    """Every process the canonical matcher calls a gateway; no ancestor of ours is left out
    (an update run from inside a gateway must still see that gateway)."""
    for pid in all_pids():
        cmdline = read_cmdline(pid)
        if not cmdline or not looks_like_gateway_command_line(cmdline):
            continue
        # environ is read only for gateway-shaped processes: it is the expensive part of a scan.
        environ, ident, inner = read_environ(pid), process_identity(pid), own_pid(pid)
        if environ is not None and ident is not None and inner is not None:  # else it has gone
            yield _Seen(pid, ProcessIdentity(inner, ident.start_time), environ, gateway_served_profiles(cmdline))


def _scan(root: Path) -> list[tuple[ProcessIdentity, GatewayRecord]]:
    """(the identity it knows itself by, its record) for every gateway process of ours."""
    from fleet.supervisors import detect_supervisor  # the scan's alone: a status the sockets answer needs none

    real_root = os.path.realpath(root)
    # Which profile a process serves, from a state file naming that very process: a gateway
    # started with --profile runs under the root's HERMES_HOME, and one in a container runs
    # on a home mounted elsewhere, so its environment alone cannot say.
    by_identity = _state_files_by_identity(root)
    profiles = homes.list_profiles(root)
    found: list[tuple[ProcessIdentity, GatewayRecord]] = []
    for seen in _gateway_processes():
        supervisor = detect_supervisor(seen.environ)
        host = ProcessIdentity(seen.pid, seen.self_identity.start_time)
        if seen.self_identity in by_identity:
            states = by_identity[seen.self_identity]
            records = [
                _record_from_state(
                    profile,
                    homes.profile_home(profile, root),
                    host,
                    states[profile],
                    source="scan",
                    supervisor=supervisor,
                )
                for profile in still_served(states)
            ]
        elif os.path.realpath(homes.root_home(seen.environ)) == real_root:  # another install's is never ours
            # A multiplex gateway serves the profiles of its set that have a home; any other the
            # profile its environment names.
            served = tuple(p for p in seen.served or () if p in profiles)
            names = served if seen.served is not None else (homes.active_profile(seen.environ),)
            records = [
                GatewayRecord(
                    profile=profile,
                    pid=seen.pid,
                    start_time=host.start_time,
                    state=UNKNOWN,
                    code_sha=None,
                    code_version=None,
                    active_turns=None,
                    supervisor=supervisor,
                    source="scan",
                    home=homes.profile_home(profile, root),
                    served_profiles=served,
                )
                for profile in names
            ]
        else:
            continue
        found.extend((seen.self_identity, record) for record in records)
    return found


def still_served(states: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Of the profiles whose state files name one process, those it still serves: the ones in a
    live state (a multiplex gateway leaves the file of a profile it let go stopped); all of them
    when none is live (the whole process is on its way out, and says so in each)."""
    live = [profile for profile, state in states.items() if state.get("gateway_state") in LIVE_STATES]
    return live or list(states)


def _state_files_by_identity(root: Path) -> dict[ProcessIdentity, dict[str, dict[str, Any]]]:
    """The process each state file names -> {profile: its state}: one profile for a gateway of
    one profile, each profile it serves for a multiplex gateway. A file that says it is another
    profile's (a symlinked profile's home) is that profile's alone."""
    states: dict[ProcessIdentity, dict[str, dict[str, Any]]] = {}
    for profile in homes.list_profiles(root):
        state = _read_state(homes.profile_home(profile, root))
        if not state or state.get("profile", profile) != profile:
            continue
        ident = state_record.identity(state)
        if ident is not None:
            states.setdefault(ident, {})[profile] = state
    return states
