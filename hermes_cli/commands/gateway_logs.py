"""``hermes logs gateway [-p NAME] [--follow] [--lines N] [--json]``: a gateway's log records,
whichever supervisor runs it (``fleet.log_sources``), as text or as JSON lines.

``--follow`` keeps printing what is added until Ctrl-C (exit 130, as every command) or until
the reader goes away (exit 141, quietly). A file log is polled; a journal is followed by
``journalctl --follow``, stopped with the command. Every read is bounded: the end of a file
(``TAIL_BYTES``), a journal's ``--lines``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet.log_sources import FileLog, JournalLog, LogSource, NoLogSource, journal_argv, log_source
from fleet.supervisors.errors import SupervisorError, SupervisorUnavailable
from hermes_cli import log_lines
from hermes_cli.commands.gateway_manage import OWNER_ORDER, find_owner
from shared import homes
from shared.layout import GATEWAY_STATE_FILE

# How much of a file's end is read for its last lines; a shared log is searched this far back.
TAIL_BYTES = 4 * 1024 * 1024
FOLLOW_POLL = 0.2
READ_TIMEOUT = 30.0
STOP_WAIT = 5.0


class NoGatewayLogs(SupervisorError):
    """Nothing keeps this gateway's log records where this command can read them."""

    code = "no_gateway_logs"


def cmd_logs(args) -> int:
    args.json_lines = True  # an error ends the JSON lines on one line too
    profile = homes.active_profile()
    home = homes.profile_home(profile, homes.root_home(), must_exist=True)
    unit = find_owner(profile, home)
    if unit is None:
        raise _unsupervised(profile, home)
    source = log_source(unit)
    if isinstance(source, FileLog) and not source.path.is_file():
        raise NoGatewayLogs(
            f"the log of profile {profile}'s gateway ({unit.kind} {unit.name}) does not exist yet: {source.path}",
            detail={"field": "path", "path": str(source.path), "profile": profile, "supervisor": unit.kind},
        )
    shown = 0
    for record in _records(source, profile, args.lines, follow=args.follow):
        _print(args, record)
        shown += 1
    if shown == 0 and not args.follow:
        raise NoGatewayLogs(_nothing_found(profile, unit.kind, source), detail=_where(profile, unit.kind, source))
    return 0


def _print(args, record: dict[str, Any]) -> None:
    text = json.dumps(record, ensure_ascii=False, default=str) if args.json else log_lines.render(record)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()  # a follower's reader sees each record at once; a gone reader is found here


def _records(source: LogSource, profile: str, lines: int, *, follow: bool) -> Iterator[dict[str, Any]]:
    """The last ``lines`` records of ``profile`` in ``source``, then (``follow``) every new one."""
    if isinstance(source, JournalLog):
        yield from _journal(source, lines, follow=follow)
    else:
        shared = source.shared
        yield from (
            r for r in _file(source, profile, lines, follow=follow) if log_lines.belongs(r, profile, shared=shared)
        )


# --- files ------------------------------------------------------------------------------------


def _file(source: FileLog, profile: str, lines: int, *, follow: bool) -> Iterator[dict[str, Any]]:
    with open(source.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - TAIL_BYTES))
        chunk = f.read(TAIL_BYTES)
        if size > TAIL_BYTES:
            chunk = chunk.partition(b"\n")[2]  # the first line read is cut: not a line
        complete, _, partial = chunk.rpartition(b"\n")
        kept = [r for r in map(_decoded, complete.splitlines()) if log_lines.belongs(r, profile, shared=source.shared)]
        yield from kept[-lines:] if lines else []
        if not follow:
            return
        yield from _tail(source.path, f, partial)


def _tail(path: Path, f, partial: bytes) -> Iterator[dict[str, Any]]:
    """What is written to ``path`` from here on, until interrupted; a file rotated away (a new
    inode, or shorter than what was read) is read anew from its start."""
    try:
        while True:
            data = f.read(TAIL_BYTES)
            if data:
                *whole, partial = (partial + data).split(b"\n")
                for raw in whole:
                    yield _decoded(raw)
                continue
            time.sleep(FOLLOW_POLL)
            try:
                st = os.stat(path)
            except FileNotFoundError:  # between a rotation's rename and its new file
                continue
            if st.st_ino != os.fstat(f.fileno()).st_ino or st.st_size < f.tell():
                f.close()
                f = open(path, "rb")
                partial = b""
    finally:
        f.close()


def _decoded(raw: bytes) -> dict[str, Any]:
    return log_lines.from_line(raw.decode("utf-8", "replace"))


# --- the journal ------------------------------------------------------------------------------


def _journal(source: JournalLog, lines: int, *, follow: bool) -> Iterator[dict[str, Any]]:
    argv = journal_argv(source, lines, follow=follow)
    if not follow:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=READ_TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise _no_journalctl(source) from None
        except subprocess.TimeoutExpired:
            raise SupervisorUnavailable(
                f"journalctl did not answer within {READ_TIMEOUT:g}s", detail={"field": "journal", "unit": source.unit}
            ) from None
        yield from _entries(done.stdout.splitlines())
        return
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    except FileNotFoundError:
        raise _no_journalctl(source) from None
    try:
        assert child.stdout is not None
        yield from _entries(child.stdout)
    finally:
        child.terminate()
        try:
            child.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _entries(lines) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # journalctl writes one JSON object a line; anything else is not an entry
        if isinstance(entry, dict):
            yield log_lines.from_journal(entry)


def _no_journalctl(source: JournalLog) -> SupervisorUnavailable:
    return SupervisorUnavailable(
        f"journalctl is not installed: the journal of {source.unit} cannot be read",
        detail={"field": "journal", "unit": source.unit},
    )


# --- what cannot be read ----------------------------------------------------------------------


def _nothing_found(profile: str, kind: str, source: LogSource) -> str:
    where = f"the journal of {source.unit}" if isinstance(source, JournalLog) else str(source.path)
    said = f"no log records of profile {profile}'s gateway ({kind}) in {where}"
    if isinstance(source, FileLog) and source.shared:
        return f"{said}: several gateways share it, and only JSON records name their profile (HERMES_LOG_FORMAT=json)"
    return said


def _where(profile: str, kind: str, source: LogSource) -> dict[str, Any]:
    if isinstance(source, JournalLog):
        return {"field": "journal", "profile": profile, "supervisor": kind, "unit": source.unit, "user": source.user}
    return {"field": "path", "profile": profile, "supervisor": kind, "path": str(source.path), "shared": source.shared}


def _unsupervised(profile: str, home: Path) -> NoGatewayLogs | NoLogSource:
    """Why an unsupervised gateway's records cannot be read: what its state file says runs it."""
    try:
        state = json.loads((home / GATEWAY_STATE_FILE).read_text())
    except (OSError, ValueError):
        state = None
    supervisor = state.get("supervisor") if isinstance(state, dict) else None
    detail = {"field": "supervisor", "profile": profile, "home": str(home), "looked_in": list(OWNER_ORDER)}
    if supervisor == "container":
        return NoLogSource(
            f"the gateway of profile {profile} runs in a container: its engine keeps its log"
            " (`podman logs` or `docker logs` of its container)",
            detail={**detail, "supervisor": supervisor},
        )
    if supervisor is not None:
        return NoLogSource(
            f"the gateway of profile {profile} ran {supervisor} (pid {state.get('pid')}): its records went to the"
            " stderr it was started with, which nothing here keeps",
            detail={**detail, "supervisor": supervisor},
        )
    return NoGatewayLogs(
        f"no supervisor runs the gateway of profile {profile}, and its home has no gateway state file: no log to read;"
        " run it with `hermes mesh up` or `hermes gateway install --supervisor KIND`",
        detail=detail,
    )
