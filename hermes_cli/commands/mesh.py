"""``hermes mesh up|down|status``: the install's embedded supervisor, a gateway per profile
(forked from one gateway host where it runs, ``--programs``: a program each), and at most one
multiplex gateway (``--serve``) for the profiles it serves.

Anchored on the root home, whichever profile is active.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from fleet.supervisors import supervisord
from hermes_cli import output
from shared import homes


def _served(raw: str | None) -> tuple[str, ...]:
    """The ``--serve a,b`` set, normalized as the multiplex gateway does; () without it."""
    if raw is None:
        return ()
    served = homes.parse_served(raw)
    for name in served:
        homes.profile_home(name, homes.root_home(), must_exist=True)
    return served


def _profiles(raw: str | None) -> list[str] | None:
    """The ``--profiles a,b`` list, validated and required to exist; None means every profile."""
    if raw is None:
        return None
    root = homes.root_home()
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        homes.validate_profile_name(raw)  # raises: an empty list names no profile
    for name in names:
        homes.profile_home(homes.validate_profile_name(name), root, must_exist=True)
    return list(dict.fromkeys(names))


class StartProgress:
    """Start-up progress on stderr: one line rewritten in place on a terminal, otherwise a
    plain line for each state change, so logs and pipes get no control characters."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last: dict[str, str] = {}
        self._drawn = False

    def __call__(self, states: Mapping[str, str], elapsed: float) -> None:
        if self._tty:
            paint = output.painter(self._stream)
            face = paint.skin.spinner["waiting_faces"][int(elapsed * 4) % len(paint.skin.spinner["waiting_faces"])]
            summary = ", ".join(f"{paint.paint(name, 'banner_accent')} {state}" for name, state in states.items())
            self._stream.write(
                f"\r\033[K{paint.paint(face, 'banner_border')} starting gateways ({elapsed:.1f}s): {summary}"
            )
            self._drawn = True
        else:
            for name, state in states.items():
                if self._last.get(name) != state:
                    self._stream.write(f"{name}: {state} ({elapsed:.1f}s)\n")
        self._last = dict(states)
        self._stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _profile_cell(program: Mapping[str, Any]) -> str:
    """A program's profile, or the profiles the multiplex program serves."""
    if program.get("served_profiles"):
        return ",".join(program["served_profiles"])
    return program["profile"] or "?"


def _status_text(data: dict[str, Any]) -> str:
    sup = data["supervisord"]
    if sup["running"]:
        head = f"supervisord: running, pid {sup['pid']}" + (f", since {sup['started_at']}" if sup["started_at"] else "")
        if sup["problem"]:
            head += f" — {sup['problem']}"
    else:
        head = "supervisord: not running"
    lines = [head, f"config:      {data['config']}"]
    if data["programs"]:
        rows = [
            (p["name"], _profile_cell(p), p["state"], p["pid"] or "", _uptime(p["uptime"]), p["description"])
            for p in data["programs"]
        ]
        lines += ["", output.table(("PROGRAM", "PROFILE", "STATE", "PID", "UPTIME", "DESCRIPTION"), rows)]
    else:
        lines.append("no gateways configured; run `hermes mesh up`")
    return "\n".join(lines)


# The install-wide workers outside supervisord (``shared.spawn.WORKERS``) are stopped with the
# mesh. The auth worker starts on demand; the handoff retries and the hook reporter also start
# with the mesh (retries left by any process must be finished, and gateways in a managed
# session report through it).
WITH_THE_MESH = ("handoff_retry", "hook_reporter")


def _hosted(args) -> bool:
    """``--host``, ``--programs``, or neither: the gateway host wherever it can run."""
    from fleet.supervisors.host import host_supported

    if getattr(args, "host", False):
        return True
    return not getattr(args, "programs", False) and host_supported()


def cmd_up(args) -> int:
    from shared.spawn import ensure_service

    root = homes.root_home()
    profiles = _profiles(getattr(args, "profiles", None))
    served = _served(getattr(args, "serve", None))
    for worker in WITH_THE_MESH:  # first: the gateways' first reports find the reporter up
        ensure_service(root, worker, f"services.{worker}", claim=True)  # this mesh runs here
    progress = StartProgress()
    try:
        status = supervisord.up(root, profiles, served=served, host=_hosted(args), progress=progress)
    finally:
        progress.close()
    output.emit(args, status.to_dict(), _status_text)
    return 0


def cmd_down(args) -> int:
    from shared.spawn import stop_workers

    root = homes.root_home()
    report = supervisord.down(root)
    workers = stop_workers(root)

    def text(d: dict[str, Any]) -> str:
        lines = []
        if d["supervisord"] is not None:
            stopped = ", ".join(d["programs"]) or "no programs"
            lines.append(f"stopped supervisord (pid {d['supervisord']['pid']}) and {stopped}")
        if d["orphans"]:
            lines.append(f"stopped gateways left by a dead supervisord: pids {', '.join(map(str, d['orphans']))}")
        lines += [f"stopped the {name} (pid {pid})" for name, pid in d["workers"].items()]
        if d["killed"]:
            lines.append(f"warning: did not stop in time, killed with SIGKILL: pids {', '.join(map(str, d['killed']))}")
        return "\n".join(lines) or "the mesh was not running"

    output.emit(args, {**report.to_dict(), "workers": workers}, text)
    return 0


def cmd_status(args) -> int:
    output.emit(args, supervisord.status(homes.root_home()).to_dict(), _status_text)
    return 0
