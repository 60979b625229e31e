"""``hermes gateway status|list|drain``: the install's gateways, found through their control
sockets first (``fleet.discovery``), with those of every other host this home names
(``shared.mesh_hosts``), and a drain of the active profile's gateway.

In text another host's gateway is always named ``HOST:PROFILE``: its name then stays the same
when some host adds a profile of that name, and it is never read as a profile of this install,
whose gateways keep the bare names ``--profile`` takes. In JSON each row has its bare
``profile`` and its ``host`` ("" for this install's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet import discovery
from fleet.health import MIN_HEALTHY_SECONDS, UNKNOWN, Health
from fleet.health_probe import probe_health
from hermes_cli import output
from hermes_cli.service_client import answers, connect
from shared import config_text, exit_codes, homes, mesh_hosts
from shared.endpoint_lock import lock_says
from shared.errors import HermesError
from shared.gateways import ops
from shared.gateways.ops import GatewayError
from shared.layout import CONFIG_FILE
from shared.locks import probe
from shared.protocol import Code, RemoteError
from shared.transport import NO_RETRY

# The drain answer can only come after the deadline; this much more is allowed for the reply.
DRAIN_REPLY_MARGIN = 10.0


class GatewayNotRunning(GatewayError):
    code = "gateway_not_running"


def _dash(value: object) -> object:
    return "-" if value is None else value


def _shared_processes(gateways: list[dict[str, Any]]) -> dict[tuple[int, object], tuple[str, ...]]:
    """(pid, start time) -> the profiles it serves, for each process listed that serves several
    (a multiplex gateway): its rows share one pid, which the text marks and explains once."""
    served: dict[tuple[int, object], set[str]] = {}
    for g in gateways:
        if g["multiplex"]:
            served.setdefault((g["pid"], g["start_time"]), set()).update(g["served_profiles"])
    return {key: tuple(sorted(names, key=homes.profile_order)) for key, names in served.items()}


def _pid_and_footnotes(gateways: list[dict[str, Any]]) -> tuple[Callable[[dict[str, Any]], str], list[str]]:
    """The PID cell of a gateway (``4242*`` when its process serves several profiles) and the
    footnotes that say which, one per such process."""
    shared = _shared_processes(gateways)

    def pid(g: dict[str, Any]) -> str:
        return f"{g['pid']}*" if (g["pid"], g["start_time"]) in shared else str(_dash(g["pid"]))

    notes = [f"* one process (pid {p}) serves {', '.join(names)}" for (p, _), names in shared.items()]
    return pid, notes


def _host(g: dict[str, Any]) -> str:
    return g["host"] or mesh_hosts.LOCAL


def _name(g: dict[str, Any]) -> str:
    """The PROFILE cell: ``HOST:PROFILE`` for another host's gateway."""
    return mesh_hosts.qualified(g["host"], g["profile"])


def _order(row: dict[str, Any]) -> tuple[str, bool, str]:
    """This install's rows first, then each host's; by profile within each."""
    return row["host"], *homes.profile_order(row["profile"])


def _with_notes(table: str, notes: list[str]) -> str:
    return "\n".join([table, *notes]) if notes else table


def _refuse_unsafe_run_dirs(root: Path) -> None:
    """UnsafeRunDir for the first profile whose gateway's dir is not private: discovery asks
    no socket there, and a listing that silently left that gateway out would mislead."""
    for profile in homes.list_profiles(root):
        try:
            homes.endpoint(homes.profile_home(profile, root), "gateway", create=False)
        except homes.EndpointPathTooLong:
            continue


def _rows(found: discovery.Survey) -> list[dict[str, Any]]:
    """A row per gateway found, each with its ``error`` (None), and one per profile whose gateway,
    asked over TCP, gave no answer and is out of sight (no state file or process here): state
    ``refused`` or ``offline``. A refusal of a gateway listed otherwise (its state file is here) is
    that profile's best-informed row's error; such a gateway that was only slow to answer is
    listed as it was found. This install's first, default profile first; then each host's."""
    rows = [{**record.to_dict(), "error": None} for record in found.records]
    for unreached in found.unreached:
        same = (unreached.host, unreached.profile)
        row = next((r for r in rows if (r["host"], r["profile"]) == same), None)
        if row is None:
            rows.append(unreached.to_dict())
        elif unreached.state == discovery.REFUSED:
            row["error"] = unreached.to_dict()["error"]
    return sorted(rows, key=_order)  # stable: best-informed first


def _state(g: dict[str, Any]) -> str:
    """The STATE cell: a refused gateway's says which refusal."""
    if g["error"] is None or g["state"] == discovery.OFFLINE:
        return str(g["state"])
    if g["state"] == discovery.REFUSED:
        return f"{discovery.REFUSED}: {g['error']['code']}"
    return f"{g['state']} ({discovery.REFUSED}: {g['error']['code']})"


def health_window(root: Path, asked: float | None) -> tuple[float, str | None]:
    """The health window, and why config.yaml's could not be taken (None: it was, or there is
    none): ``--min-healthy``, else the root's ``update.min_healthy``, the window the update's
    verify judges by (the file parsed only where it names the key), else the default."""
    if asked is not None:
        return asked, None
    try:
        if not config_text.mentions(root, b"min_healthy"):
            return MIN_HEALTHY_SECONDS, None
        from services.updater import load_settings  # the parser, only where it is needed

        return load_settings(root).min_healthy, None
    except (OSError, HermesError) as exc:  # status still answers: the default, and why
        reason = exc.message if isinstance(exc, HermesError) else f"{CONFIG_FILE}: {exc.strerror or exc}"
        return MIN_HEALTHY_SECONDS, f"{reason}; the default {MIN_HEALTHY_SECONDS:g} s was taken"


# Why the health of a gateway known only by its unanswered socket cannot be told.
_UNTOLD = {discovery.REFUSED: "its gateway refused this client", discovery.OFFLINE: "its gateway could not be reached"}


def _with_health(
    rows: list[dict[str, Any]], found: discovery.Survey, min_healthy: float, remote: dict[str, homes.Endpoint]
) -> None:
    """Each row's ``health``: a probe turn's verdict (``fleet.health``); a refused or offline row's is unknown."""
    health = probe_health(found.records, min_healthy=min_healthy, remote=remote)
    for row in rows:
        verdict = health.get((_name(row), row["pid"])) or Health(UNKNOWN, _UNTOLD[row["state"]])
        row["health"] = verdict.to_dict()


def health_notes(gateways: list[dict[str, Any]]) -> list[str]:
    """Why each gateway that is not healthy is not, one line each, after a blank line that ends
    the table (a row with no health, as a verify's from before health has, says nothing)."""
    notes = [
        f"{_named(g)}: {g['health']['state']}: {g['health']['why']}"
        for g in gateways
        if (g.get("health") or {}).get("why")
    ]
    return ["", *notes] if notes else []


def _named(g: dict[str, Any]) -> str:
    name = mesh_hosts.qualified(g.get("host", ""), g["profile"])  # a verify's rows have no host
    return f"{name} (pid {g['pid']})" if g.get("pid") else name


def cmd_status(args) -> int:
    if args.watch:
        from hermes_cli.commands.mesh_top import cmd_top

        return cmd_top(args)
    _refuse_unsafe_run_dirs(homes.root_home())
    root = homes.root_home()
    remote = mesh_hosts.gateway_endpoints(root)
    found = discovery.survey(root, remote=remote)
    window, unread = health_window(root, args.min_healthy)
    data: dict[str, Any] = {"gateways": _rows(found), "min_healthy": window}
    if unread:
        data["min_healthy_error"] = unread
    _with_health(data["gateways"], found, window, remote)

    def text(d: dict[str, Any]) -> str:
        if not d["gateways"]:
            return f"no gateway is running for {homes.root_home()}"
        pid, notes = _pid_and_footnotes(d["gateways"])
        rows = [
            (
                _name(g),
                _host(g),
                pid(g),
                _state(g),
                g["health"]["state"],
                (g["code_sha"] or "-")[:12],
                _dash(g["code_version"]),
                _dash(g["active_turns"]),
                g["supervisor"],
                g["source"],
            )
            for g in d["gateways"]
        ]
        headers = ("PROFILE", "HOST", "PID", "STATE", "HEALTH", "CODE", "VERSION", "TURNS", "SUPERVISOR", "SOURCE")
        unread_window = [f"! {d['min_healthy_error']}"] if d.get("min_healthy_error") else []
        return _with_notes(output.table(headers, rows), notes + health_notes(d["gateways"]) + unread_window)

    output.emit(args, data, text)
    return 0


def cmd_list(args) -> int:
    root = homes.root_home()
    _refuse_unsafe_run_dirs(root)
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _rows(discovery.survey(root, remote=mesh_hosts.gateway_endpoints(root))):  # best-informed first
        first.setdefault((row["host"], row["profile"]), row)
    local = [
        {"profile": name, "host": "", "home": str(homes.profile_home(name, root)), "gateway": first.get(("", name))}
        for name in homes.list_profiles(root)
    ]
    # Another host's profiles are known only by its gateways: their homes are on that host.
    others = [{"profile": p, "host": h, "home": None, "gateway": row} for (h, p), row in first.items() if h]
    data = {"profiles": local + others}

    def text(d: dict[str, Any]) -> str:
        pid, notes = _pid_and_footnotes([p["gateway"] for p in d["profiles"] if p["gateway"]])
        rows = [
            (
                _name(p),
                _host(p),
                _dash(p["home"]),
                f"{pid(p['gateway'])} {_state(p['gateway'])}" if p["gateway"] else "-",
            )
            for p in d["profiles"]
        ]
        return _with_notes(output.table(("PROFILE", "HOST", "HOME", "GATEWAY"), rows), notes)

    output.emit(args, data, text)
    return 0


def cmd_drain(args) -> int:
    profile = homes.active_profile()
    home = homes.active_home()
    endpoint = homes.endpoint(home, ops.SERVICE, create=False)
    not_running = GatewayNotRunning(
        f"profile {profile!r} has no running gateway to drain", detail={"profile": profile, "home": str(home)}
    )
    # A live gateway holds its endpoint lock; without it a stale socket file would make
    # the client wait out the whole drain timeout for nobody. A lock that cannot tell here (a
    # gateway in a container or on another host) leaves it to the socket, asked briefly first.
    running = lock_says(endpoint)
    if running is False or (running is None and not answers(endpoint)):
        raise not_running
    holder = probe(endpoint.lock_path).holder if running else None
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            answer = client.call(
                ops.DRAIN, {"deadline": args.deadline, "stay": args.stay}, timeout=args.deadline + DRAIN_REPLY_MARGIN
            )
    except RemoteError as exc:
        if exc.code == Code.UNAVAILABLE:
            raise not_running from None
        raise
    data = {
        "profile": profile,
        "home": str(home),
        "pid": holder.pid if holder else None,
        "finished": answer["finished"],
        "cut": answer["cut"],
        "exit_code": answer["exit_code"],
        "exits": answer["exit_code"] == exit_codes.PLANNED_RESTART,
        # A multiplex gateway drains every profile it serves: the process is what restarts.
        "profiles": answer.get("profiles") or [profile],
    }

    def text(d: dict[str, Any]) -> str:
        after = (
            f"it exits {exit_codes.PLANNED_RESTART} (planned restart) so its supervisor starts it again"
            if d["exits"]
            else "it stays up, draining, and refuses new turns until restarted"
        )
        served = [p for p in d["profiles"] if p != d["profile"]]
        together = f", with the profiles its process also serves ({', '.join(served)})" if served else ""
        return (
            f"drained gateway {d['profile']} (pid {_dash(d['pid'])}){together}: "
            f"{len(d['finished'])} turn(s) finished, {len(d['cut'])} cut"
            + (f" ({', '.join(d['cut'])})" if d["cut"] else "")
            + f"; {after}"
        )

    output.emit(args, data, text)
    return 0
