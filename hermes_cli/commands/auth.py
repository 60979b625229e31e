"""``hermes auth login|status|logout nous``: a client of the install's auth worker.

``login`` starts the worker if it is not running and renders the sign-in's states: the code
and its link, a spinner while waiting (plain lines when not a terminal), a line each time the
portal is asked again (``Retrying``), then the result. With ``--json`` every state is one
JSON line, the terminal one last, so a script can show the code while the sign-in is still
waiting.

The result is always the worker's own terminal state. A Ctrl-C cancels the sign-in; a cancel
always wins unless the save had begun, and then the command waits (bounded) for the worker
to finish and shows how it ended, settle and the guest handoff included. If the worker stops
answering first (killed, stopped, hung), the command says what the account store holds:
``WorkerLost``, ``saved`` telling whether an account was saved during this sign-in. From the
first Ctrl-C on, and once the end is known, further Ctrl-Cs change nothing: the exit code is
the sign-in's.

``login --host NAME`` signs in the install of another host this home sees
(``shared.mesh_hosts``) on that host's own auth worker, over CURVE TCP, with the same prompt
and endings; that host uses its own portal, trust and default profile, and nothing is started
there. Each install signs in once, wherever its ``hermes`` runs.

``status`` and ``logout`` work on the account store directly: no worker, no network. ``status``
also asks every host that names an auth worker for its sign-in (its worker's ``status``, which
carries no token), all at once within one bound: a host that does not answer is ``offline``,
one that refuses the handshake ``refused``.

Exit codes: 0 signed in, 1 failed, timed out or the worker lost (settle and the handoff are
not known to have run: ``hermes auth status nous`` shows the account), 2 refused (already
signed in), 130 cancelled.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from hermes_cli import host_outcome, output
from shared import exit_codes, homes

EXIT_BY_STATE = {
    "Completed": exit_codes.OK,
    "AlreadySignedIn": exit_codes.REFUSED,
    "Cancelled": exit_codes.INTERRUPTED,
    "TimedOut": exit_codes.FAILED,
    "Failed": exit_codes.FAILED,
    "WorkerLost": exit_codes.FAILED,
}
# The account a sign-in's install holds now (its public view; None: not known).
AccountView = Callable[[], "dict[str, Any] | None"]
# How long a Ctrl-C waits for a sign-in whose save had begun to end (its save, handoff and settle
# are bounded by the worker; this bounds the worker not answering).
FINISH_SECONDS = 120.0
# How a call ends when the worker stopped answering mid-sign-in: died, stopped or hung, or (on
# TCP) its connection was lost; every code of ``shared.protocol.UNANSWERED`` among them.
WORKER_GONE = frozenset(
    {"connection_reset", "connection_lost", "unavailable", "timeout", "deadline_exceeded", "shutting_down"}
)


def cmd_login(args) -> int:
    from nous.portal import ca_bundle, portal_url
    from services.auth_worker import ops
    from shared.spawn import ensure_service

    args.json_lines = True
    root = homes.root_home()
    sign_in_id = secrets.token_hex(8)
    request: dict[str, Any] = {"sign_in_id": sign_in_id, "replace_account": bool(args.replace)}
    if args.host:
        from hermes_cli.host_calls import reach

        endpoint = reach(root, args.host, ops.SERVICE)
        # The host's own portal and trust (a CA bundle's path here means nothing there), and
        # its default profile: the profiles here are not that install's.
        request["profile"] = homes.DEFAULT_PROFILE
        account: AccountView = partial(_worker_account, endpoint)
    else:
        request["profile"] = homes.active_profile()
        request["portal_url"] = portal_url()
        bundle = ca_bundle()
        if bundle:
            request["ca_bundle"] = os.path.abspath(bundle)
        account = partial(_account_view, root)
        endpoint = ensure_service(root, ops.SERVICE, "services.auth_worker")
    before = account()  # to tell, should the worker be lost, whether this sign-in saved
    view = _LoginView(args)
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        terminal = _sign_in(endpoint, request, view, account, before)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the end is known: it is the sign-in's
    except KeyboardInterrupt:  # later Ctrl-Cs are ignored from here on
        view.stop()
        terminal = _after_ctrl_c(endpoint, sign_in_id, view, account, before)
    view.stop()
    view.state(terminal)
    return EXIT_BY_STATE.get(str(terminal.get("state")), exit_codes.FAILED)


def _interrupt_once(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _sign_in(endpoint, request: dict[str, Any], view: _LoginView, account: AccountView, before) -> dict[str, Any]:
    """The sign-in's terminal state, as the worker answers it; what the store holds if it stops."""
    from hermes_cli.service_client import connect
    from services.auth_worker import ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            return client.call(ops.SIGN_IN, request, on_event=view.state)
    except RemoteError as exc:
        if exc.code not in WORKER_GONE:
            raise
        return _store_says(account, before)


def _after_ctrl_c(endpoint, sign_in_id: str, view: _LoginView, account: AccountView, before) -> dict[str, Any]:
    """Cancel the sign-in after a Ctrl-C; the worker's own word on how it ended. When the
    worker has none (it never got the sign-in, which now never starts, or it restarted) or
    stops answering: ``Cancelled`` if nothing was saved and the cancel won, else what the
    store holds."""
    from hermes_cli.service_client import connect
    from services.auth_worker import Cancelled, ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            answer = client.call(ops.CANCEL, {"sign_in_id": sign_in_id})
            if "state" in answer:
                return answer["state"]
            if answer["known"]:
                if not answer["cancelled"]:
                    view.finishing()
                state = _wait_for_end(client, sign_in_id)
                if state is not None:
                    return state
    except RemoteError as exc:
        if exc.code not in WORKER_GONE:
            raise
        return _store_says(account, before)
    lost = _store_says(account, before)
    return Cancelled().to_wire() if answer["cancelled"] and lost["saved"] is False else lost


def _wait_for_end(client, sign_in_id: str) -> dict[str, Any] | None:
    """A running sign-in's terminal state, asked of the worker within ``FINISH_SECONDS``; None
    when it does not know the sign-in or the time ran out."""
    from services.auth_worker import ops

    deadline = time.monotonic() + FINISH_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        wait = min(left, ops.RESULT_WAIT_MAX)
        answer = client.call(ops.SIGN_IN_RESULT, {"sign_in_id": sign_in_id, "wait": wait}, timeout=wait + 5)
        if "state" in answer:
            return answer["state"]
        if not answer["running"]:
            return None
    return None


def _account_view(root) -> dict[str, Any] | None:
    """The store's account without any token; None when the store cannot be read."""
    from nous import store
    from shared.errors import HermesError

    try:
        return store.public_view(store.read_account(root))
    except (HermesError, OSError):
        return None


def _worker_account(endpoint) -> dict[str, Any] | None:
    """The account another host's worker says its store holds, without any token; None when
    it does not say within the bound (its store is out of sight from here)."""
    from hermes_cli.host_calls import ASK_SECONDS
    from hermes_cli.service_client import connect
    from services.auth_worker import ops
    from shared.errors import HermesError
    from shared.transport import NO_RETRY

    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            return _public_account(client.call(ops.STATUS, timeout=ASK_SECONDS))
    except HermesError:
        return None


def _public_account(answer: Any) -> dict[str, Any]:
    """A worker's ``status`` answer's account, cut to what status shows (``store.public_view``):
    whatever another host's worker sent, nothing else of it is shown or kept."""
    from nous import store

    account = answer.get("account") if isinstance(answer, dict) else None
    return store.public_view(account if isinstance(account, dict) and account.get("sub") else None)


def _store_says(account: AccountView, before: dict[str, Any] | None) -> dict[str, Any]:
    from services.auth_worker import worker_lost

    return worker_lost(before, account()).to_wire()


class _LoginView:
    """Renders states as they come: text (with a spinner on a terminal) or JSON lines."""

    def __init__(self, args) -> None:
        self._json = output.wants_json(args)
        self._browser = not args.no_browser
        self._spin: threading.Thread | None = None
        self._text = ""  # what the spinner shows: waiting, or retrying
        self._stopped = threading.Event()
        self._expires: float | None = None

    def state(self, state: dict[str, Any]) -> None:
        if self._json:
            print(json.dumps(state), flush=True)
            return
        name = state.get("state")
        if name == "Code":
            self._expires = time.monotonic() + float(state.get("expires_in") or 0)
            print(state["copy_terminal"], flush=True)
            if self._browser and _has_browser():
                import webbrowser

                webbrowser.open(state["verification_uri_complete"])
        elif name in ("Waiting", "Retrying"):
            self._progress(name, state["copy_terminal"])
        else:
            self.stop()
            stream = sys.stdout if name == "Completed" else sys.stderr
            print(state.get("copy_terminal", ""), file=stream, flush=True)

    def finishing(self) -> None:
        """A Ctrl-C came too late to cancel: say why the command goes on a moment."""
        if not self._json:
            print("The account was already being saved: finishing the sign-in.", file=sys.stderr, flush=True)

    def _progress(self, name: str, text: str) -> None:
        self._text = text
        if not sys.stderr.isatty():
            print(text, file=sys.stderr, flush=True)
        elif self._spin is None and name == "Waiting":
            self._spin = threading.Thread(target=self._spinner, daemon=True)
            self._spin.start()
        elif self._spin is None:
            print(text, file=sys.stderr, flush=True)  # asking for a code: no spinner yet

    def stop(self) -> None:
        self._stopped.set()
        if self._spin is not None:
            self._spin.join(timeout=1)
            self._spin = None
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def _spinner(self) -> None:
        paint = output.painter(sys.stderr)
        faces = paint.skin.spinner["waiting_faces"]  # the skin's own waiting faces
        frame = 0
        while not self._stopped.wait(0.25):
            left = max(0, int((self._expires or 0) - time.monotonic()))
            face = paint.paint(faces[frame % len(faces)], "banner_accent")
            sys.stderr.write(f"\r\033[K{face} {self._text} (code expires in {left // 60}:{left % 60:02d})")
            sys.stderr.flush()
            frame += 1


def _has_browser() -> bool:
    """Only where a browser can show itself: never a text browser taking over this terminal."""
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def cmd_status(args) -> int:
    from nous import store
    from nous.guest_handoff.records import public_records

    root = homes.root_home()
    view = store.public_view(store.read_account(root))
    view["profile"] = homes.active_profile()
    view["guest"] = store.read_store(root).get("guest") is not None
    view["handoff"] = public_records(root)
    view["hosts"] = _host_rows(root)
    output.emit(args, view, lambda v: "\n".join([_status_text(v), *_handoff_lines(v), *_host_lines(v)]))
    return 0


def _host_rows(root) -> list[dict[str, Any]]:
    """The sign-in of every other host that names an auth worker, asked of each at once."""
    from services.auth_worker import ops
    from shared import mesh_hosts

    hosts = [host for host in mesh_hosts.hosts(root).values() if ops.SERVICE in host.services]
    if not hosts:
        return []
    from hermes_cli.host_calls import ask_all

    outcomes = ask_all(root, [(host, ops.SERVICE) for host in hosts], ops.STATUS)
    return [_host_row(host.name, outcomes[(host.name, ops.SERVICE)]) for host in hosts]


def _host_row(host: str, outcome: host_outcome.Outcome) -> dict[str, Any]:
    """One host's row: ``state`` is its sign-in (``signed_in``, ``not_signed_in``,
    ``needs_sign_in``) when its worker answered, else how asking it ended (``offline``,
    ``refused``, ``untrusted``, ``error``, with the typed ``code``)."""
    if outcome.state != host_outcome.OK:
        return {"host": host, "state": outcome.state, "signed_in": None, "account": None, "code": outcome.code}
    account = _public_account(outcome.answer)
    if account.get("sub") is None:
        state = "not_signed_in"
    else:
        state = "signed_in" if account["signed_in"] else "needs_sign_in"
    return {"host": host, "state": state, "signed_in": account["signed_in"], "account": account, "code": None}


def _host_lines(view: dict[str, Any]) -> list[str]:
    lines = []
    for row in view["hosts"]:
        account = row["account"] or {}
        if row["state"] == "signed_in":
            said = f"signed in as {account.get('email')} ({account.get('tier')} tier)"
        elif row["state"] == "needs_sign_in":
            said = f"{account.get('email')} needs to sign in again"
        elif row["state"] == "not_signed_in":
            said = "not signed in"
        else:
            said = f"{row['state']} ({row['code']})"
        if row["state"] in ("not_signed_in", "needs_sign_in"):
            said += f": `hermes auth login nous --host {row['host']}`"
        lines.append(f"  host {row['host']}: {said}")
    return ["Other hosts:", *lines] if lines else []


def _handoff_lines(view: dict[str, Any]) -> list[str]:
    return [f"  guest apps:    {line}" for record in view["handoff"] for line in record["lines"]]


def _status_text(view: dict[str, Any]) -> str:
    if view.get("email") is None:
        if view.get("guest"):
            return "Nous: on the free tier (guest). Run `hermes auth login nous` to sign in; your apps move with you."
        return "Nous: not signed in. Run `hermes auth login nous`."
    if not view["signed_in"]:
        from nous.refresh_rules import reason_words

        reason = reason_words(view.get("needs_sign_in_reason"))
        return f"Nous: {view['email']} needs to sign in again: {reason}. Run `hermes auth login nous`."
    expires = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view["expires_at"])) if view.get("expires_at") else "?"
    return "\n".join(
        (
            f"Nous: signed in as {view['email']} ({view['tier']} tier)",
            f"  host:          {view['host']}",
            f"  portal:        {view['portal']}",
            f"  token expires: {expires} (refreshed automatically)",
        )
    )


def cmd_guest(args) -> int:
    """Start the free tier: a guest identity for the install, until it signs in."""
    from nous import portal, store

    root = homes.root_home()
    account = store.read_store(root)
    if account.get("account") is not None or account.get("guest") is not None:
        state = "signed_in" if account.get("account") is not None else "guest"
        output.emit(
            args,
            {"started": False, "state": state},
            lambda r: f"Nothing to do: this install is already {r['state'].replace('_', ' ')}.",
        )
        return 0
    guest = portal.register_guest_blocking(portal.portal_url(), portal.tls_context(portal.ca_bundle()))
    started = store.save_guest(root, guest.anon, guest.id)
    output.emit(
        args, {"started": started, "state": "guest", "id": guest.id}, lambda r: "Started the free tier as a guest."
    )
    return 0


def cmd_logout(args) -> int:
    from nous import store

    removed = store.forget_account(homes.root_home(), homes.active_home())
    result = {"signed_out": removed is not None, "email": removed.get("email") if removed else None}
    output.emit(
        args, result, lambda r: f"Signed out of Nous ({r['email']})." if r["signed_out"] else "Not signed in to Nous."
    )
    return 0
