"""What starts the rollback of an unconfirmed update at its deadline.

The obligation (``services.updater.confirm``) is the only state: every trigger here can be
killed and started again, or run twice. Each timer holds ``confirm-timer.lock`` while it lives,
so no second one is started beside it.

- **The supervisor's timer.** Under the mesh's supervisord, the event listener
  ``hermes-confirm-timer`` (``listen``) is woken by supervisord's own 5-second tick (``TICK_5``)
  and looks at the obligation (one ``stat`` while nothing is owed); supervisord restarts it
  whenever it dies.
- **systemd's timer.** Where systemd is the init system, a transient timer
  (``systemd-run --on-active``) that starts a waiter at the deadline, outside every unit of
  the mesh.
- **The waiter** (``wait``): where no supervisor timer lives, a detached process in its own
  session that sleeps to the deadline in slices of at most ``SLICE`` (a confirm lets it end
  soon) and ends once nothing is owed. The updater starts one as it arms the confirm, unless a
  timer holds the lock; it is no mesh service, so the mesh dying leaves it running.
- **Every ``hermes`` command** (``settle_confirm``): past the deadline it starts the rollback there and
  then; before it, it starts a waiter when no timer holds the lock (the host rebooted, or every
  process of the mesh was killed).

Whichever fires starts ``python -m services.updater --rollback ID --confirm-expired`` detached,
and only while no update holds the update lock; that run decides, under the confirm's lock,
whether the rollback is still owed.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from services.updater.confirm import FAILED, due, mark_failed, pending_line, read_confirm, unreadable_hint
from services.updater.lock import holder
from services.updater.obligations import DIRECTORY, confirm_path
from services.updater.update_id import new_update_id
from shared import homes
from shared.errors import HermesError, failure_reason
from shared.identity import read_cmdline
from shared.locks import FileLock, LockHeld, probe
from shared.version import INSTALL_ROOT

MODULE = "services.updater.confirm_timer"
LOCK = "confirm-timer.lock"
SLICE = 5.0  # the longest a timer sleeps between two looks at the obligation
MAX_FIRES = 3  # rollbacks started for one deadline that ended without moving the tree


def lock_path(root: Path) -> Path:
    return Path(root) / DIRECTORY / LOCK


def decide(record: dict[str, Any] | None, now: float, *, update_running: bool) -> str:
    """What a timer does now: ``done`` (nothing owed, or a rollback that failed: the operator's),
    ``wait``, or ``fire``."""
    if record is None or record["state"] == FAILED:
        return "done"
    if not due(record, now) or update_running:
        return "wait"
    return "fire"


def _detached(argv: list[str], root: Path, log_name: str) -> subprocess.Popen[bytes]:
    logs = Path(root) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, homes.HOME_ENV: str(root)}
    with open(logs / log_name, "ab") as log:
        # Its own session: the command or the timer that started it may end first.
        return subprocess.Popen(
            argv,
            cwd=INSTALL_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_rollback(root: Path, record: dict[str, Any]) -> tuple[str, subprocess.Popen[bytes]]:
    """The rollback of ``record``'s update, started detached: its update id and process."""
    update_id = new_update_id()
    argv = [sys.executable, "-m", "services.updater", "--update-id", update_id]
    argv += ["--rollback", record["update_id"], "--confirm-expired"]
    return update_id, _detached(argv, root, "update.log")


def timer_alive(root: Path) -> bool:
    return probe(lock_path(root)).held


def running_timer(root: Path) -> str | None:
    """The timer that holds the lock: ``supervisord`` (its event listener), ``waiter``, or None."""
    status = probe(lock_path(root))
    if not status.held:
        return None
    argv = read_cmdline(status.holder.pid) if status.holder is not None else None
    return "supervisord" if argv and "listen" in argv else "waiter"


def ensure_timer(root: Path, record: dict[str, Any]) -> str:
    """A timer for ``record``'s deadline, named: the one that holds the lock already
    (``running_timer``), ``systemd`` for a timer of the system's systemd (armed now, or found
    armed), else ``waiter`` (one started now)."""
    running = running_timer(root)
    if running is not None:
        return running
    if systemd_booted() and (systemd_timer_active(record) or arm_systemd_timer(root, record)):
        return "systemd"
    argv = [sys.executable, "-m", MODULE, "wait", "--root", str(root)]
    _detached(argv, root, "confirm-timer.log")
    return "waiter"


# --- systemd's timer: where systemd is the init system, it starts a waiter at the deadline ---

SYSTEMD_BOOTED = "/run/systemd/system"  # exists while systemd is the init system (sd_booted)
SYSTEMCTL_TIMEOUT = 10.0


def systemd_booted() -> bool:
    return os.path.isdir(SYSTEMD_BOOTED) and shutil.which("systemd-run") is not None


def systemd_unit(record: dict[str, Any]) -> str:
    """The transient timer's name: one per update, so a second arming finds the first."""
    return f"hermes-confirm-{record['update_id']}"


def _manager() -> list[str]:
    return [] if os.geteuid() == 0 else ["--user"]


def _systemd(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=SYSTEMCTL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def systemd_timer_active(record: dict[str, Any]) -> bool:
    return _systemd(["systemctl", *_manager(), "is-active", "--quiet", f"{systemd_unit(record)}.timer"])


def arm_systemd_timer(root: Path, record: dict[str, Any]) -> bool:
    """A transient timer of systemd (``systemd-run --on-active``) that starts a waiter at the
    deadline, outside every unit of the mesh: its service keeps only its main process to itself
    (``KillMode=process``), so the rollback the waiter starts outlives it. True once armed."""
    seconds = max(1, math.ceil(record["deadline"] - time.time()))
    argv = [
        "systemd-run",
        *_manager(),
        f"--unit={systemd_unit(record)}",
        f"--on-active={seconds}s",
        "--timer-property=AccuracySec=1s",
        "--property=KillMode=process",
        "--collect",
        "--quiet",
        f"--working-directory={INSTALL_ROOT}",
        f"--setenv={homes.HOME_ENV}={root}",
        "--setenv=PYTHONUNBUFFERED=1",
        "--",
        *[sys.executable, "-m", MODULE, "wait", "--root", str(root)],
    ]
    return _systemd(argv)


def settle_confirm(root: Path) -> str | None:
    """A ``hermes`` command's look at the confirm: the line it prints, after starting the
    rollback when the deadline has passed, or a waiter when no timer lives."""
    try:
        record = read_confirm(root)
    except HermesError as exc:
        return f"⚠ {unreadable_hint(exc.message)}"
    if record is None:
        return None
    now = time.time()
    action = decide(record, now, update_running=holder(root) is not None)
    try:
        if action == "fire":
            update_id, _ = start_rollback(root, record)
            return (
                f"↺ update {record['update_id']} was not confirmed in time: rolling it back to "
                f"{record['before'][:12]} (update {update_id}; `hermes logs update --follow`)"
            )
        if action == "wait" and due(record, now):
            return (
                f"↺ update {record['update_id']} was not confirmed in time: it rolls back once the running update ends"
            )
        if action == "wait":
            ensure_timer(root, record)
    except OSError as exc:  # the command itself goes on; the next one tries again
        return f"⚠ update {record['update_id']} waits for its confirm, and no timer could be started: {failure_reason(exc)}"
    return pending_line(record, now)


class Trigger:
    """A timer's one look at the obligation: fire, wait, or done. It remembers the rollback it
    started (a second is not started while that one runs, even before it holds the update lock)
    and gives up, marking the confirm failed, after ``MAX_FIRES`` that left it owed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run: subprocess.Popen[bytes] | None = None
        self.fires = 0

    def look(self) -> tuple[str, dict[str, Any] | None]:
        """What it did (``done``, ``wait``, ``fire``) and the record it acted on."""
        record = read_confirm(self.root)
        if self.run is not None and self.run.poll() is not None:
            self.run = None  # reaped
        ours = self.run is not None
        action = decide(record, time.time(), update_running=ours or holder(self.root) is not None)
        if action != "fire" or record is None:
            return action, record
        if self.fires >= MAX_FIRES:
            why = f"{self.fires} rollbacks started at the deadline ended without moving the tree; see logs/update.log"
            mark_failed(self.root, record["update_id"], why)
            return "done", record
        update_id, self.run = start_rollback(self.root, record)
        self.fires += 1
        print(f"confirm timer: update {record['update_id']} unconfirmed: rollback {update_id}", file=sys.stderr)
        return action, record


def _take(lock: FileLock) -> bool:
    try:
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except LockHeld:
        return False
    return True


def wait(root: Path) -> int:
    """The waiter's life: to the deadline, then the rollback, then gone."""
    lock = FileLock(lock_path(root))
    if not _take(lock):
        return 0  # another timer lives
    trigger = Trigger(root)
    try:
        while True:
            try:
                action, record = trigger.look()
            except HermesError as exc:
                print(f"confirm timer: {exc.message}", file=sys.stderr, flush=True)
                return 1
            if action == "done" or record is None:
                return 0
            left = record["deadline"] - time.time()  # to the deadline; past it, while a rollback runs
            time.sleep(min(SLICE, left) if left > 0 else SLICE / 10)
    finally:
        lock.release()


HEADER_MAX = 4096  # a supervisord event header is one short line
PAYLOAD_MAX = 65536


def listen(root: Path, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The supervisor's timer: supervisord's event listener protocol on ``stdin``/``stdout``
    (READY, a header line with ``len:N``, N bytes of payload, ``RESULT 2\nOK``), one look at
    the obligation per event. Ends when supervisord closes its pipe."""
    lock = FileLock(lock_path(root))
    trigger = Trigger(root)
    pending = os.fspath(confirm_path(root))
    _take(lock)  # at once: an updater arming a confirm meanwhile sees a timer and starts no waiter
    while True:
        stdout.write(b"READY\n")
        stdout.flush()
        header = stdin.readline(HEADER_MAX)
        if not header:
            lock.release()
            return 0
        fields = dict(token.split(b":", 1) for token in header.split() if b":" in token)
        try:
            length = max(0, min(int(fields.get(b"len", b"0")), PAYLOAD_MAX))
        except ValueError:
            length = 0
        stdin.read(length)
        try:
            if not lock.held:
                _take(lock)  # a waiter started before the mesh may hold it: both acting is harmless
            if os.path.lexists(pending) or trigger.run is not None:
                action, record = trigger.look()
                left = record["deadline"] - time.time() if action == "wait" and record is not None else 0.0
                if 0.0 < left <= SLICE:  # due before the next tick: wait for it here, to fire on time
                    time.sleep(left)
                    trigger.look()
        except (HermesError, OSError) as exc:  # the next tick looks again
            print(f"confirm timer: {failure_reason(exc)}", file=sys.stderr, flush=True)
        stdout.write(b"RESULT 2\nOK")
        stdout.flush()


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m services.updater.confirm_timer")
    parser.add_argument("mode", choices=("wait", "listen"))
    parser.add_argument("--root", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.mode == "listen":
        return listen(args.root, sys.stdin.buffer, sys.stdout.buffer)
    return wait(args.root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
