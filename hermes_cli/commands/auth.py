"""``hermes auth login|status|logout nous``: a client of the install's auth worker.

``login`` starts the worker if it is not running and renders the sign-in's states: the code
and its link, a spinner while waiting (plain lines when not a terminal), then the result. A
Ctrl-C cancels the sign-in; a cancel always wins unless the account was already being saved.
With ``--json`` every state is one JSON line, the terminal one last, so a script can show the
code while the sign-in is still waiting.

``status`` and ``logout`` work on the account store directly: no worker, no network.

Exit codes: 0 signed in, 1 failed or timed out, 2 refused (already signed in), 130 cancelled.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from typing import Any

from hermes_cli import output
from shared import homes

EXIT_BY_STATE = {"Completed": 0, "AlreadySignedIn": 2, "Cancelled": 130, "TimedOut": 1, "Failed": 1}


def cmd_login(args) -> int:
    from nous.portal import ca_bundle, portal_url
    from services.auth_worker import ops
    from shared.call_rules import NO_RETRY
    from shared.spawn import ensure_service
    from shared.sync_client import connect

    args.json_lines = True
    root = homes.root_home()
    sign_in_id = secrets.token_hex(8)
    request = {
        "sign_in_id": sign_in_id,
        "profile": homes.active_profile(),
        "replace_account": bool(args.replace),
        "portal_url": portal_url(),
    }
    bundle = ca_bundle()
    if bundle:
        request["ca_bundle"] = os.path.abspath(bundle)
    endpoint = ensure_service(root, ops.SERVICE, "services.auth_worker")
    view = _LoginView(args)
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            terminal = client.call(ops.SIGN_IN, request, on_event=view.state)
    except KeyboardInterrupt:
        view.stop()
        terminal = _cancel(endpoint, sign_in_id, root)
    view.stop()
    view.state(terminal)
    return EXIT_BY_STATE.get(terminal.get("state"), 1)


def _cancel(endpoint, sign_in_id: str, root) -> dict[str, Any]:
    """Cancel the sign-in after a Ctrl-C; the terminal state to report."""
    from nous import store
    from services.auth_worker import Cancelled, Completed, ops
    from shared.call_rules import NO_RETRY
    from shared.sync_client import connect

    with connect(endpoint, retry=NO_RETRY) as client:
        answer = client.call(ops.CANCEL, {"sign_in_id": sign_in_id}, timeout=10)
    if answer.get("cancelled") or not answer.get("known"):
        return Cancelled().to_wire()
    # Too late: the account was being saved, so the sign-in completes.
    account = store.read_account(root) or {}
    return Completed(email=str(account.get("email")), tier=str(account.get("tier"))).to_wire()


class _LoginView:
    """Renders states as they come: text (with a spinner on a terminal) or JSON lines."""

    def __init__(self, args) -> None:
        self._json = output.wants_json(args)
        self._browser = not args.no_browser
        self._spin: threading.Thread | None = None
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
        elif name == "Waiting":
            if sys.stderr.isatty():
                self._spin = threading.Thread(target=self._spinner, args=(state["copy_terminal"],), daemon=True)
                self._spin.start()
            else:
                print(state["copy_terminal"], file=sys.stderr, flush=True)
        else:
            self.stop()
            stream = sys.stdout if name == "Completed" else sys.stderr
            print(state.get("copy_terminal", ""), file=stream, flush=True)

    def stop(self) -> None:
        self._stopped.set()
        if self._spin is not None:
            self._spin.join(timeout=1)
            self._spin = None
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def _spinner(self, text: str) -> None:
        paint = output.painter(sys.stderr)
        faces = paint.skin.spinner["waiting_faces"]  # the skin's own waiting faces
        frame = 0
        while not self._stopped.wait(0.25):
            left = max(0, int((self._expires or 0) - time.monotonic()))
            face = paint.paint(faces[frame % len(faces)], "banner_accent")
            sys.stderr.write(f"\r\033[K{face} {text} (code expires in {left // 60}:{left % 60:02d})")
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
    output.emit(args, view, lambda v: "\n".join([_status_text(v), *_handoff_lines(v)]))
    return 0


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
