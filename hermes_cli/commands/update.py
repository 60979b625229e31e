"""``hermes update`` and ``hermes logs update``: a client of the updater.

``hermes update`` starts the updater detached (its own session) and follows it over the
updater's control socket. The CLI dying does not stop the update; ``hermes logs update
--follow`` re-attaches. Exit codes are the update's: 0 success (also committed with
follow-ups), 1 nothing committed or rolled back, 2 refused or concurrent, 130 interrupted.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hermes_cli import output
from shared import homes
from shared.errors import HermesError
from shared.version import INSTALL_ROOT

START_TIMEOUT = 30.0
# A follower asks for progress in slices this long, checking between them that the updater lives.
FOLLOW_SLICE = 5.0


class NotConfirmed(HermesError):
    code = "confirmation_required"


def cmd_update(args) -> int:
    root = homes.root_home()
    if args.plan or args.check:
        return _plan(args, root)
    from services.updater.lock import UpdateInProgress, holder

    running = holder(root)
    if running:
        raise UpdateInProgress(root / "update.lock", running)
    if not args.yes and sys.stdin.isatty() and not output.wants_json(args):
        answer = input(f"Update {INSTALL_ROOT} and restart every gateway of {root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise NotConfirmed("not confirmed; nothing was changed")
    update_id = secrets.token_hex(6)
    updater = _spawn(root, update_id, args)
    try:
        return _follow(args, root, updater)
    except KeyboardInterrupt:
        print(
            f"\nstopped following; update {update_id} goes on (pid {updater.pid}). "
            "`hermes logs update --follow` re-attaches; `kill -INT` on that pid stops it, recorded as interrupted.",
            file=sys.stderr,
        )
        return 130


def _plan(args, root: Path) -> int:
    from services.updater.plan import make_plan, render_plan

    plan = make_plan(root, INSTALL_ROOT, branch=args.branch)
    data = plan.to_dict()
    if args.check:
        git = data.get("git") or {}
        available = bool(git) and not git.get("up_to_date", True)
        output.emit(
            args,
            {"update_available": available, "install": data["install"], "git": git},
            lambda d: "an update is available" if d["update_available"] else "already up to date",
        )
        return 0
    output.emit(args, data, lambda d: render_plan(plan))
    return 0


def _spawn(root: Path, update_id: str, args) -> subprocess.Popen:
    argv = [sys.executable, "-m", "services.updater", "--update-id", update_id]
    if args.branch:
        argv += ["--branch", args.branch]
    if args.backup:
        argv.append("--backup")
    if args.no_backup:
        argv.append("--no-backup")
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "update.log", "ab") as log:
        # Its own session: a Ctrl-C here, or the death of whatever started us, does not reach it.
        return subprocess.Popen(
            argv, cwd=INSTALL_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _follow(args, root: Path, updater: subprocess.Popen | None) -> int:
    """Follow the running update to its end, in short slices: between slices the updater's
    liveness is checked, so a follower never waits on an updater that is gone."""
    from services.updater import ops
    from services.updater.lock import holder
    from shared.call_rules import NO_RETRY
    from shared.protocol import Code, RemoteError
    from shared.sync_client import SyncClient

    def updater_alive() -> bool:
        return updater.poll() is None if updater is not None else holder(root) is not None

    endpoint = homes.endpoint(root, ops.SERVICE, create=False)
    socket = Path(endpoint.control[len("ipc://") :])
    deadline = time.monotonic() + START_TIMEOUT
    while not socket.exists() and updater_alive():
        if time.monotonic() > deadline:
            raise HermesError(f"the updater did not start within {START_TIMEOUT:g}s; see {root / 'logs' / 'update.log'}")
        time.sleep(0.05)
    view = _Progress(args)
    retry_codes = {Code.TIMEOUT, Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE, Code.SHUTTING_DOWN, Code.CONNECTION_RESET}
    with SyncClient(endpoint.control, retry=NO_RETRY) as client:
        while True:
            try:
                terminal = client.call(ops.FOLLOW, {"from": view.seen}, on_event=view.event, timeout=FOLLOW_SLICE)
            except RemoteError as exc:
                if exc.code not in retry_codes:
                    raise
                if not updater_alive():
                    return _finished(args, root)
                time.sleep(0.05)
                continue
            return _report(args, root, terminal)


def _finished(args, root: Path) -> int:
    """The updater is gone: its receipt tells how the run ended."""
    from services.updater.receipt import ReceiptStore

    receipt = ReceiptStore(root).latest()
    if receipt is None:
        raise HermesError(f"the updater exited without a receipt; see {root / 'logs' / 'update.log'}")
    data = receipt.to_dict()
    path = ReceiptStore(root).path_for(receipt)
    return _report(args, root, {"update_id": data["update_id"], "outcome": data["outcome"],
                                "exit_code": data.get("exit_code") or 0, "receipt": str(path)})  # fmt: skip


def _report(args, root: Path, terminal: dict[str, Any]) -> int:
    from services.updater.receipt import ReceiptStore

    receipt = ReceiptStore(root).latest()
    data = receipt.to_dict() if receipt else {}
    document = {
        "update_id": terminal["update_id"],
        "outcome": terminal["outcome"],
        "exit_code": terminal["exit_code"],
        "receipt": terminal["receipt"],
        "before": data.get("before"),
        "after": data.get("after"),
        "fleet": data.get("fleet", []),
        "followups": data.get("followups", []),
        "user_action": data.get("user_action"),
    }
    output.emit(args, document, _summary_text)
    return int(terminal["exit_code"])


def _summary_text(d: dict[str, Any]) -> str:
    lines = []
    if d["fleet"]:
        rows = [
            (r["profile"], r["supervisor"] or "-", r["pid"] or "-", r["state"], (r["running"] or "-")[:12],
             (r["expected"] or "-")[:12], r["verdict"])
            for r in d["fleet"]
        ]  # fmt: skip
        lines += [output.table(("PROFILE", "SUPERVISOR", "PID", "STATE", "RUNNING", "EXPECTED", "VERDICT"), rows), ""]
    for owed in d["followups"]:
        lines.append(f"⚠ {owed['step']}: {owed['reason']}")
    if d.get("user_action"):
        lines.append(f"action needed: {d['user_action']}")
    lines.append(f"update {d['update_id']}: {d['outcome']} (exit {d['exit_code']}); receipt: {d['receipt']}")
    return "\n".join(lines)


class _Progress:
    """Stage progress on stderr. In a terminal the running stage is one line rewritten in
    place and each finished stage stays as a line with its mark; elsewhere (a pipe, a log)
    every event is a plain line with no control characters."""

    MARKS = {"done": "✓", "skip": "-", "fail": "✗", "refused": "✗", "parked": "!", "fallback": "!"}

    def __init__(self, args, stream=sys.stderr) -> None:
        self.quiet = output.wants_json(args)
        self.stream = stream
        self.tty = stream.isatty()
        self.seen = 0  # events shown so far: the next slice starts after them

    def event(self, event: dict[str, Any]) -> None:
        if not isinstance(event, dict):
            return
        if isinstance(event.get("seq"), int):
            self.seen = max(self.seen, event["seq"] + 1)
        if self.quiet:
            return
        stage, status = str(event.get("stage")), str(event.get("status"))
        text = f"{stage:<11} {status}{_detail_text(stage, event.get('detail'))}"
        if not self.tty:
            print(f"  {text}", file=self.stream, flush=True)
        elif status in self.MARKS or stage == "done":
            self.stream.write(f"\r\033[K{self.MARKS.get(status, '✓')} {text}\n")
        else:
            self.stream.write(f"\r\033[K… {text}")
        self.stream.flush()


def _detail_text(stage: str, detail: Any) -> str:
    if isinstance(detail, (str, int)):
        return f" {detail}"
    if isinstance(detail, dict) and stage in ("plan", "apply", "snapshot", "completion"):
        return " " + ", ".join(f"{k}={str(v)[:12]}" for k, v in detail.items() if v is not None)
    return ""


def cmd_logs(args) -> int:
    from services.updater.lock import holder
    from services.updater.receipt import ReceiptStore

    root = homes.root_home()
    if args.follow and holder(root):
        return _follow(args, root, None)
    store = ReceiptStore(root)
    if args.all:
        receipts, problems = store.all()
        rows = [r.to_dict() for r in receipts]
        data = {"receipts": rows, "unreadable": [p.to_dict() for p in problems]}
        output.emit(args, data, _list_text)
        return 0
    receipt = store.latest()
    if receipt is None:
        output.emit(args, {"receipt": None}, lambda d: "no update has run in this install yet")
        return 0
    output.emit(args, receipt.to_dict(), _receipt_text)
    return 0


def _list_text(d: dict[str, Any]) -> str:
    rows = [
        (r["started_at"], r["update_id"], r["outcome"], r.get("exit_code"),
         str((r.get("before") or {}).get("code_sha") or "-")[:12], str((r.get("after") or {}).get("code_sha") or "-")[:12])
        for r in d["receipts"]
    ]  # fmt: skip
    text = output.table(("STARTED", "UPDATE", "OUTCOME", "EXIT", "BEFORE", "AFTER"), rows)
    return text + "".join(f"\nunreadable: {p['path']}: {p['reason']}" for p in d["unreadable"])


def _receipt_text(r: dict[str, Any]) -> str:
    lines = [f"update {r['update_id']}: {r['outcome']} (exit {r.get('exit_code')}), started {r['started_at']}"]
    for step in r.get("steps", []):
        lines.append(f"  {'ok  ' if step['ok'] else 'FAIL'} {step['name']}")
    for skip in r.get("skips", []):
        lines.append(f"  skip {skip['name']}: {skip['reason']}")
    for owed in r.get("followups", []):
        lines.append(f"  ⚠ {owed['step']}: {owed['reason']}")
    return "\n".join(lines)
