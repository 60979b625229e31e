"""``hermes update`` and ``hermes logs update``: a client of the updater.

``hermes update`` starts the updater detached (its own session) and follows it over the
updater's control socket. The CLI dying does not stop the update; ``hermes logs update
--follow`` re-attaches. Exit codes are the update's: 0 success (also committed with
follow-ups), 1 nothing committed or rolled back, 2 refused or concurrent, 130 interrupted.
Its report names what the run found interrupted, what it retried and what is still owed,
whether the code was already up to date, and for a run that did not succeed the step it
failed at and why;
``--plan`` and ``--check`` name what is owed, since ``hermes update`` prints no owed-restart
warning of its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.errors import ConfirmationRequired
from services.updater import UpdateError
from shared import exit_codes, homes
from shared.errors import HermesError
from shared.files import read_json
from shared.redaction import redact
from shared.version import INSTALL_ROOT, code_sha

START_TIMEOUT = 30.0
# How long a finished update's updater has to exit (dropping the update lock) before its report.
EXIT_WAIT = 30.0
# What the updater catches as "stop" once it runs; one that dies of them began nothing.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
# A follower asks for progress in slices this long, checking between them that the updater lives.
FOLLOW_SLICE = 5.0
# How often ``logs update --follow`` looks for an update to start, while none runs.
START_POLL = 0.1


class NoUpdateStarted(UpdateError):
    """``logs update --follow`` found no update running, and none started within its wait."""

    code = "no_update_started"


class UpdaterExited(UpdateError):
    """The updater ended before it wrote a receipt of its own (it began nothing)."""

    code = "updater_exited"


def cmd_update(args) -> int:
    root = homes.root_home()
    if args.confirm:
        return _confirm(args, root)
    if args.plan or args.check:
        return _plan(args, root)
    from services.updater import UpdateInProgress, holder, lock_path, new_update_id

    running = holder(root)
    if running:
        raise UpdateInProgress(lock_path(root), running)
    what = "Update"
    if args.rollback is not None:
        what = f"Roll back {INSTALL_ROOT} to {_rollback_target(root, args)[:12]}"
    if not args.yes and sys.stdin.isatty() and not output.wants_json(args):
        try:
            answer = input(f"{what} and restart every gateway of {root}? [y/N] ")
        except EOFError:  # Ctrl-D: no answer is no
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise ConfirmationRequired("not confirmed; nothing was changed")
    update_id = new_update_id()
    updater = _spawn(root, update_id, args)
    try:
        return _follow(args, root, updater, update_id)
    except KeyboardInterrupt:
        print(
            f"\nstopped following; update {update_id} goes on (pid {updater.pid}). "
            "`hermes logs update --follow` re-attaches; `kill -INT` on that pid stops it, recorded as interrupted.",
            file=sys.stderr,
        )
        return exit_codes.INTERRUPTED


def _confirm(args, root: Path) -> int:
    """``--confirm``: the update that waits for its confirm stays; nothing else changes."""
    if args.plan or args.check:
        raise output.UsageRefused("hermes update: --confirm changes the confirm alone: no --plan or --check")
    from services.updater import confirm_update

    record = confirm_update(root)
    document = {
        "confirmed": record["update_id"],
        "code_sha": record["after"] or code_sha(INSTALL_ROOT),
        "deadline": record["deadline"],
        "was": record["state"],
        "reason": record["reason"],
    }
    output.emit(args, document, _confirmed_text)
    return exit_codes.OK


def _confirmed_text(document: dict[str, Any]) -> str:
    stays = f"the install stays on {str(document['code_sha'])[:12]}"
    if document["confirmed"] is None:  # the file was unreadable: removed, nothing moved
        return f"✓ removed the unreadable confirm record ({document['reason']}): {stays}"
    return f"✓ update {document['confirmed']} confirmed: {stays}"


def _plan(args, root: Path) -> int:
    """``--plan`` prints the plan the updater would follow; ``--check`` says whether there is
    newer code: exit 0 when it could tell, 1 when it could not, 2 for an install kind that
    is not updated in place."""
    from services.updater import availability, load_settings, plan_update, render_plan, update_options

    plan = plan_update(root, INSTALL_ROOT, update_options(args), load_settings(root))
    data = plan.to_dict()
    owed = _owed(root)
    if args.check:
        available, why = availability(plan)
        output.emit(
            args,
            {
                "update_available": available,
                "reason": why,
                "install": data["install"],
                "git": data["git"],
                "owed": owed,
            },
            lambda d: _with_owed(why, owed),
        )
        return exit_codes.OK if available is not None else exit_codes.REFUSED if plan.refused else exit_codes.FAILED
    within = args.confirm_within
    then = f"\n⏲ then rolls back by itself unless `hermes update --confirm` within {within:g}s" if within else ""
    output.emit(
        args, {**data, "confirm_within": within, "owed": owed}, lambda d: _with_owed(render_plan(plan) + then, owed)
    )
    return 0


def _rollback_target(root: Path, args) -> str:
    """The commit a rollback goes back to; a rollback that would be refused is refused here,
    before any updater starts (the updater's plan asks the same again)."""
    from services.updater import load_settings, plan_update, update_options

    plan = plan_update(root, INSTALL_ROOT, update_options(args), load_settings(root))
    assert plan.rollback is not None
    return plan.rollback["target"]


def _owed(root: Path) -> dict[str, Any]:
    """What earlier updates left owed, which the next ``hermes update`` retries."""
    from services.updater import owed_confirm, read_completion, read_fleet, read_stash

    return {
        "completion": read_completion(root),
        "fleet_restart": read_fleet(root),
        "stash": read_stash(root),
        "confirm": owed_confirm(root),
    }


def _with_owed(text: str, owed: dict[str, Any]) -> str:
    lines = [text]
    if owed["completion"]:
        lines.append(f"⚠ owed: the completion of update {owed['completion']['update_id']}; `hermes update` runs it")
    for profile, part in owed["fleet_restart"].items():
        lines.append(f"⚠ owed: a restart of gateway {profile} onto {str(part['expected'])[:12]} ({part['reason']})")
    if owed["stash"]:
        stash = owed["stash"]
        lines.append(f"⚠ owed: your local changes in stash {stash['sha'][:12]}; `hermes update` puts them back")
    return "\n".join(lines)


def _spawn(root: Path, update_id: str, args) -> subprocess.Popen:
    argv = [sys.executable, "-m", "services.updater", "--update-id", update_id]
    if args.branch:
        argv += ["--branch", args.branch]
    if args.backup:
        argv.append("--backup")
    if args.no_backup:
        argv.append("--no-backup")
    if args.no_canary:
        argv.append("--no-canary")
    if args.max_parallel is not None:
        argv += ["--max-parallel", str(args.max_parallel)]
    if args.take_held:
        argv.append("--take-held")
    if args.confirm_within is not None:
        argv += ["--confirm-within", repr(args.confirm_within)]
    if args.rollback is not None:
        argv += ["--rollback", args.rollback] if args.rollback else ["--rollback"]
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "update.log", "ab") as log:
        # Its own session: a Ctrl-C here, or the death of whatever started us, does not reach it.
        return subprocess.Popen(
            argv,
            cwd=INSTALL_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _follow(args, root: Path, updater: subprocess.Popen | None, update_id: str | None = None) -> int:
    """Follow the running update (``update_id``, when this command started it) to its end, in
    short slices: between slices the updater's liveness is checked, so a follower never waits
    on an updater that is gone."""
    from hermes_cli.service_client import connect
    from services.updater import holder, ops
    from shared.protocol import UNANSWERED, Code, RemoteError
    from shared.transport import NO_RETRY

    def updater_alive() -> bool:
        return updater.poll() is None if updater is not None else holder(root) is not None

    endpoint = homes.endpoint(root, ops.SERVICE, create=False)
    socket = Path(endpoint.control[len("ipc://") :])
    deadline = time.monotonic() + START_TIMEOUT
    while endpoint.tcp is None and not socket.exists() and updater_alive():
        if time.monotonic() > deadline:
            raise HermesError(
                f"the updater did not start within {START_TIMEOUT:g}s; see {root / 'logs' / 'update.log'}"
            )
        time.sleep(0.05)
    view = _Progress(args)
    retry_codes = UNANSWERED | {Code.DEADLINE_EXCEEDED, Code.SHUTTING_DOWN}
    with connect(endpoint, retry=NO_RETRY) as client:
        while True:
            try:
                # The socket is the install's, not this run's: an updater this command did not
                # start (one that holds the lock ours was refused by) may be the one answering.
                if (
                    update_id is not None
                    and client.call(ops.STATUS, timeout=FOLLOW_SLICE).get("update_id") != update_id
                ):
                    if not updater_alive():
                        return _finished(args, root, updater, update_id)
                    time.sleep(0.05)
                    continue
                terminal = client.call(ops.FOLLOW, {"from": view.seen}, on_event=view.event, timeout=FOLLOW_SLICE)
            except RemoteError as exc:
                if exc.code not in retry_codes:
                    raise
                if not updater_alive():
                    return _finished(args, root, updater, update_id)
                time.sleep(0.05)
                continue
            if update_id is not None and terminal.get("update_id") != update_id:
                continue  # another run took the socket between the two calls
            _let_go(updater)
            return _report(args, terminal)


def _let_go(updater: subprocess.Popen | None) -> None:
    """Wait, bounded, for the updater this command started to exit after its last word: it
    drops the update lock on its way out, and a command run right after this one (a rollback)
    must not find the lock still held by an update that has ended."""
    if updater is None:
        return
    try:
        updater.wait(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        pass  # its report is written; a lingering updater is the next command's to name


def _finished(args, root: Path, updater: subprocess.Popen | None, update_id: str | None) -> int:
    """The updater is gone: its receipt tells how the run ended. An updater that began no
    receipt (refused by the lock, or stopped before it began) ends this command too."""
    from services.updater import ReceiptStore, UpdateInProgress, holder, lock_path

    store = ReceiptStore(root)
    receipt = store.latest()
    if receipt is None or (update_id is not None and receipt.update_id != update_id):
        code = updater.returncode if updater is not None else None
        if code is not None and -code in STOP_SIGNALS:  # stopped while it started: nothing was begun
            return _report(args, {"update_id": update_id, "outcome": "interrupted", "exit_code": 130, "receipt": None})
        if code == 2:  # another update took the lock between our check and the updater's
            raise UpdateInProgress(lock_path(root), holder(root) or {})
        raise UpdaterExited(
            f"the updater exited ({code}) before it wrote a receipt; see {root / 'logs' / 'update.log'}",
            detail={"update_id": update_id, "exit_code": code},
        )
    terminal = {
        "update_id": receipt.update_id,
        "outcome": receipt.outcome,
        "exit_code": receipt.exit_code,
        "receipt": str(store.path_for(receipt)),
    }
    if not receipt.finished:  # its updater died mid-run: the next update marks it and retries what it owes
        terminal.update(outcome="interrupted", exit_code=exit_codes.INTERRUPTED)
    return _report(args, terminal)


def _report(args, terminal: dict[str, Any]) -> int:
    from services.updater import Receipt

    data = Receipt.from_dict(read_json(Path(terminal["receipt"]))).to_dict() if terminal["receipt"] else {}
    steps = data.get("steps", [])
    document = {
        "update_id": terminal["update_id"],
        "outcome": terminal["outcome"],
        "exit_code": terminal["exit_code"],
        "receipt": terminal["receipt"],
        "before": data.get("before"),
        "after": data.get("after"),
        # A rollback: {of, target, backup} (the update it undoes, where it went, the archive).
        "rollback": (data.get("plan") or {}).get("rollback"),
        # A --confirm-within run's deadline; a rollback's, the deadline it was started for.
        "confirm": _step_detail(steps, "confirm"),
        "confirm_expired": _step_detail(steps, "confirm-expired"),
        "found_interrupted": [u for s in steps if s["name"] == "found-interrupted" for u in s["detail"]["updates"]],
        "retried": [s["detail"] for s in steps if s["name"] == "retry"],
        "fleet": data.get("fleet", []),
        "followups": data.get("followups", []),
        "restart_failed": _restart_failed(data),
        "user_action": data.get("user_action"),
        # The tree already held the target: nothing moved, though what was owed was retried.
        "up_to_date": bool((data.get("apply") or {}).get("up_to_date")),
        "failure": _failure(terminal["outcome"], steps),
        # Why it was not updated in place, with the command that updates it (a container's, say).
        "refusal": _refusal(terminal["outcome"], data.get("skips", [])),
    }
    output.emit(args, document, _summary_text)
    return int(terminal["exit_code"])


def _step_detail(steps: list[dict[str, Any]], name: str) -> Any:
    return next((s["detail"] for s in steps if s["name"] == name and s["ok"]), None)


def _restart_failed(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every gateway or unit the run failed to restart, with why (redacted again): a unit that
    was failed before the run is named here only, since no follow-up owes its restart."""
    return [
        redact({"profile": o["profile"], "unit": o.get("unit"), "reason": o.get("reason")})
        for o in data.get("restart") or []
        if not o["ok"]
    ]


def _refusal(outcome: str, skips: list[dict[str, Any]]) -> str | None:
    if outcome != "refused":
        return None
    return next((str(skip["reason"]) for skip in skips if skip.get("name") == "apply"), None)


def _failure(outcome: str, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step a run that did not succeed failed at, with the reason its progress line showed
    (redacted again: the receipt file is read from disk)."""
    failed = [s for s in steps if not s["ok"]]
    if outcome == "success" or not failed:
        return None
    if outcome == "rolled_back":  # what the revert did is in its own steps: the gate is why
        failed = [s for s in failed if s["name"] == "gate"] or failed
    step = redact(failed[-1])
    detail = step["detail"]
    reason = detail.get("message") if isinstance(detail, dict) else detail
    named = detail.get("detail") if isinstance(detail, dict) else None  # a canary's: its profile and check
    where = {key: named[key] for key in ("profile", "check") if isinstance(named, dict) and key in named}
    return {"step": step["name"], "reason": None if reason is None else str(reason), **where, "detail": detail}


def _fleet_lines(fleet: list[dict[str, Any]]) -> list[str]:
    """The verify's fleet: a row per profile's gateway, its commit against the expected one,
    and its health, with why for each that is not healthy."""
    from hermes_cli.commands.gateway_status import health_notes  # its lines, as status writes them

    rows = [
        (
            r["profile"],
            r.get("supervisor") or "-",
            r.get("pid") or "-",
            r.get("state") or "-",
            (r.get("running") or "-")[:12],
            (r.get("expected") or "-")[:12],
            r["verdict"],
            (r.get("health") or {}).get("state", "-"),
        )
        for r in fleet
    ]
    headers = ("PROFILE", "SUPERVISOR", "PID", "STATE", "RUNNING", "EXPECTED", "VERDICT", "HEALTH")
    return [output.table(headers, rows), *health_notes(fleet)]


def _summary_text(d: dict[str, Any]) -> str:
    lines = [
        f"! update {update_id} had been interrupted; marked so in its receipt" for update_id in d["found_interrupted"]
    ]
    if d.get("rollback"):
        lines.append(f"↺ rollback of update {d['rollback']['of']} to {d['rollback']['target'][:12]}")
    if d.get("confirm_expired"):
        lines.append(f"↺ update {d['confirm_expired']['update_id']} was not confirmed by its deadline")
    if d["up_to_date"]:
        lines.append(f"Already up to date ({str((d['after'] or {}).get('code_sha') or '-')[:12]})")
    for retry in d["retried"]:
        if retry["owed"] == "completion":
            lines.append(f"↻ retried the completion of update {retry['update_id']} ({retry['how']})")
        elif retry["owed"] == "stash":
            lines.append(
                f"↻ local changes in stash {retry['sha'][:12]}, left by update {retry['update_id']}: {retry['how']}"
            )
        else:
            lines.append(f"↻ retried the restart of {', '.join(retry['gateways'])}")
    if d["fleet"]:
        lines += [*_fleet_lines(d["fleet"]), ""]
    for owed in d["followups"]:
        lines.append(f"⚠ {owed['step']}: {owed['reason']}")
    for failed in d["restart_failed"]:
        lines.append(
            f"⚠ restart: gateway {failed['profile']} ({failed['unit'] or '-'}): {failed['reason'] or 'failed'}"
        )
    if d.get("user_action"):
        lines.append(f"action needed: {d['user_action']}")
    if d.get("refusal"):
        lines.append(f"✗ {d['refusal']}")
    failure = d.get("failure") or {}
    if failure.get("reason") and d.get("outcome") in ("failed", "rolled_back"):  # why, beside the progress
        lines.append(f"{'↺' if d['outcome'] == 'rolled_back' else '✗'} {failure['step']}: {failure['reason']}")
    lines.append(f"update {d['update_id']}: {d['outcome']} (exit {d['exit_code']}); receipt: {d['receipt']}")
    armed = d.get("confirm") or {}
    if armed.get("deadline_at"):
        lines.append(f"⏲ `hermes update --confirm` by {armed['deadline_at']}, or it rolls back by itself")
    return "\n".join(lines)


class _Progress:
    """Stage progress on stderr. In a terminal the running stage is one line rewritten in
    place and each finished stage stays as a line with its mark; elsewhere (a pipe, a log)
    every event is a plain line with no control characters."""

    MARKS = {
        "done": "✓",
        "skip": "-",
        "fail": "✗",
        "refused": "✗",
        "parked": "!",
        "fallback": "!",
        "owed": "!",
        "interrupted": "!",
        "retry": "↻",
        "adopted": "↻",
    }

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
        detail = _detail_text(stage, event.get("detail"))
        if not self.tty:
            print(f"  {stage:<11} {status}{detail}", file=self.stream, flush=True)
            return
        paint = output.painter(self.stream)
        text = f"{paint.paint(f'{stage:<11}', 'banner_accent')} {status}{paint.paint(detail, 'banner_dim')}"
        if status in self.MARKS or stage == "done":
            self.stream.write(f"\r\033[K{paint.paint(self.MARKS.get(status, '✓'), 'banner_title')} {text}\n")
        else:
            face = paint.skin.spinner["thinking_faces"][0]  # the running stage wears the skin's face
            self.stream.write(f"\r\033[K{paint.paint(face, 'banner_border')} {text}")
        self.stream.flush()


def _detail_text(stage: str, detail: Any) -> str:
    if isinstance(detail, (str, int)):
        return f" {detail}"
    if isinstance(detail, dict) and stage in ("plan", "snapshot", "fetch", "canary", "apply", "completion", "revert"):
        return " " + ", ".join(f"{k}={str(v)[:12]}" for k, v in detail.items() if v is not None)
    return ""


def cmd_logs(args) -> int:
    from services.updater import ReceiptStore

    root = homes.root_home()
    if args.follow:
        return _follow_next(args, root)
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


def _follow_next(args, root: Path) -> int:
    """Follow the update in progress, else the next one to start within ``--wait`` seconds: a
    follower started just before ``hermes update`` takes the lock follows that run, never the
    receipt of the one before it."""
    from services.updater import ReceiptStore, holder

    store = ReceiptStore(root)
    seen = _latest_id(store)
    deadline = time.monotonic() + args.wait
    waiting = False
    while True:
        running = holder(root)
        if running is not None and running["update_id"] is not None:
            return _follow(args, root, None, running["update_id"])
        newest = _latest_id(store)
        if newest != seen and newest is not None:  # it began and ended between two looks
            return _finished(args, root, None, newest)
        if time.monotonic() >= deadline:
            last = f"; the latest, update {seen}, is shown by `hermes logs update`" if seen else ""
            raise NoUpdateStarted(
                f"no update is running, and none started within {args.wait:g}s{last}",
                detail={"waited": args.wait, "latest": seen},
            )
        if not waiting and running is None:
            print(f"waiting up to {args.wait:g}s for an update to start…", file=sys.stderr, flush=True)
            waiting = True
        time.sleep(START_POLL)


def _latest_id(store) -> str | None:
    """The newest receipt's update id; an unreadable one is ``"unreadable"`` (a run that starts
    writes a readable one)."""
    try:
        receipt = store.latest()
    except HermesError:
        return "unreadable"
    return receipt.update_id if receipt is not None else None


def _list_text(d: dict[str, Any]) -> str:
    rows = [
        (
            r["started_at"],
            r["update_id"],
            r["outcome"],
            r.get("exit_code"),
            str((r.get("before") or {}).get("code_sha") or "-")[:12],
            str((r.get("after") or {}).get("code_sha") or "-")[:12],
        )
        for r in d["receipts"]
    ]
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
    if r.get("fleet"):
        lines += ["", *_fleet_lines(r["fleet"])]
    return "\n".join(lines)
