"""The auth worker process: sign-ins on request, and the keepalive in the background.

It starts the guest-handoff retry worker if that is not running, and follows new code on
disk by itself once no sign-in is in flight (``shared.lifecycle``; ``main`` does the exec).
How each sign-in ended is kept a while (``outcomes``), for a client that missed the answer;
an exec forgets it, and such a client then says what the account store holds.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from nous import refresh, store
from nous.errors import NousError
from nous.portal import ca_bundle, portal_url
from nous.refresh_rules import RefreshOutcome
from services.auth_worker import keepalive, ops
from services.auth_worker.outcomes import Outcomes
from services.auth_worker.signin import CancelFlag, SignInRequest, run_sign_in
from services.auth_worker.states import Cancelled, Completed
from shared import homes
from shared.errors import HermesError
from shared.homes import Endpoint
from shared.lifecycle import Lifecycle, serve_until_stopped
from shared.locks import FileLock
from shared.protocol import Code
from shared.spawn import ServiceStartCancelled, ensure_service
from shared.transport import Call
from shared.worker_main import install_service

log = logging.getLogger(__name__)

MAX_SIGN_INS = 8
SIGN_IN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class WorkerError(NousError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _Running:
    """A sign-in in flight: its cancel, and an event set once its end is kept."""

    flag: CancelFlag = field(default_factory=CancelFlag)
    ended: trio.Event = field(default_factory=trio.Event)


def _sign_in_id(args: dict[str, Any]) -> str:
    sign_in_id = args["sign_in_id"]
    if not SIGN_IN_ID_RE.fullmatch(sign_in_id):
        raise WorkerError(Code.INVALID_FIELD, "sign_in_id must be 1-64 letters, digits, '-' or '_'")
    return sign_in_id


class AuthWorker:
    def __init__(self, root: Path, endpoint: Endpoint, lock: FileLock):
        self.root = Path(root)
        self._sign_ins: dict[str, _Running] = {}
        self._outcomes = Outcomes()
        self._wake = trio.Event()
        self._last_refresh: RefreshOutcome | None = None
        self._next_check: float | None = None
        self.life = Lifecycle(busy=lambda: bool(self._sign_ins))
        self._stopping = threading.Event()  # set once its stop begins: it starts no worker after that
        self.service = install_service(ops.SERVICE, root, endpoint, lock, lambda: {"root": str(self.root)})
        self.service.add(ops.SIGN_IN, self._sign_in)
        self.service.add(ops.CANCEL, self._cancel)
        self.service.add(ops.SIGN_IN_RESULT, self._sign_in_result)
        self.service.add(ops.STATUS, self._status)
        self.service.add(ops.REFRESH, self._refresh)
        self.service.add(ops.TOKEN, self._token)

    async def run(self) -> int:
        return await serve_until_stopped(
            self.service, self.life, self._keepalive, self._start_handoff_retry, before_stop=self._cancel_all
        )

    def _cancel_all(self) -> None:
        self._stopping.set()
        for running in self._sign_ins.values():
            running.flag.cancel()  # nothing half-done is saved by a worker on its way out

    async def _start_handoff_retry(self) -> None:
        """Every long-lived Nous process makes sure the handoff retries run, guest or not."""
        start = partial(ensure_service, self.root, "handoff_retry", "services.handoff_retry", cancel=self._stopping)
        try:
            await trio.to_thread.run_sync(start)
        except ServiceStartCancelled:
            log.info("stopping: the handoff retry worker this one was starting is stopped too")
        except (HermesError, OSError) as exc:
            log.warning("could not start the handoff retry worker: %s", getattr(exc, "message", exc))

    # --- sign-in --------------------------------------------------------------------------

    async def _sign_in(self, call: Call) -> dict[str, Any]:
        args = call.args
        sign_in_id = _sign_in_id(args)
        if sign_in_id in self._sign_ins or self._outcomes.get(sign_in_id, time.monotonic()) is not None:
            raise WorkerError(ops.SIGN_IN_EXISTS, f"a sign-in named {sign_in_id!r} is running or has run")
        if len(self._sign_ins) >= MAX_SIGN_INS:
            raise WorkerError(ops.TOO_MANY_SIGN_INS, f"{MAX_SIGN_INS} sign-ins are already waiting")
        profile = homes.validate_profile_name(args["profile"])
        home = homes.profile_home(profile, self.root, must_exist=True)
        request = SignInRequest(
            sign_in_id=sign_in_id,
            root=self.root,
            home=home,
            portal_url=portal_url(args.get("portal_url")),
            ca_bundle=args.get("ca_bundle") or ca_bundle(),
            replace_account=bool(args.get("replace_account")),
        )
        running = self._sign_ins[sign_in_id] = _Running()
        try:
            flag = running.flag
            state = await run_sign_in(request, lambda s: call.emit(s.to_wire()), flag, persist_guard=flag.commit)
            ended = state.to_wire()
            # Kept before the answer goes out: a client that misses the answer asks for it.
            self._outcomes.record(sign_in_id, ended, time.monotonic())
        finally:
            del self._sign_ins[sign_in_id]
            running.ended.set()
        log.info("sign-in %s ended: %s", sign_in_id, state.name)
        if isinstance(state, Completed):
            self._wake.set()  # the keepalive takes the new account on at once
        return ended

    async def _cancel(self, call: Call) -> dict[str, Any]:
        sign_in_id = _sign_in_id(call.args)
        running = self._sign_ins.get(sign_in_id)
        if running is not None:
            # The flag's lock may be held for an instant by a save in a worker thread.
            return {"known": True, "cancelled": await trio.to_thread.run_sync(running.flag.cancel)}
        now = time.monotonic()
        ended = self._outcomes.get(sign_in_id, now)
        if ended is not None:
            return {"known": True, "cancelled": False, "state": ended}
        self._outcomes.record(sign_in_id, Cancelled().to_wire(), now)  # a late sign_in of this id never starts
        return {"known": False, "cancelled": True}

    async def _sign_in_result(self, call: Call) -> dict[str, Any]:
        sign_in_id = _sign_in_id(call.args)
        running = self._sign_ins.get(sign_in_id)
        if running is not None:
            with trio.move_on_after(float(call.args.get("wait") or 0)):  # bounded by the op's field
                await running.ended.wait()
        ended = self._outcomes.get(sign_in_id, time.monotonic())
        if ended is not None:
            return {"known": True, "running": False, "state": ended}
        still = sign_in_id in self._sign_ins
        return {"known": still, "running": still}

    # --- account and keepalive --------------------------------------------------------------

    async def _status(self, call: Call) -> dict[str, Any]:
        account = await trio.to_thread.run_sync(store.read_account, self.root)
        last = self._last_refresh
        return {
            "account": store.public_view(account),
            "keepalive": {
                "last": None if last is None else {"result": last.result, "reason": last.reason},
                "next_check": self._next_check,
            },
            "sign_ins": len(self._sign_ins),
            "pid": os.getpid(),
            "code_sha": self.life.code_sha,
        }

    async def _refresh(self, call: Call) -> dict[str, Any]:
        outcome = await self._refresh_now(force=bool(call.args.get("force")))
        return {"result": outcome.result, "reason": outcome.reason, "expires_at": outcome.expires_at}

    async def _token(self, call: Call) -> dict[str, Any]:
        await self._refresh_now(force=False)  # a no-op unless the token is due
        account = await trio.to_thread.run_sync(store.read_account, self.root)
        if account is None:
            raise WorkerError(ops.NOT_SIGNED_IN, "this install is not signed in to Nous")
        if account.get("needs_sign_in"):
            raise WorkerError(ops.NEEDS_SIGN_IN, "the Nous sign-in lapsed; sign in again")
        return {"access_token": account["access_token"], "expires_at": account["expires_at"], "host": account["host"]}

    async def _refresh_now(self, *, force: bool) -> RefreshOutcome:
        outcome = await trio.to_thread.run_sync(lambda: refresh.refresh_account(self.root, force=force))
        self._last_refresh = outcome if outcome.result != "fresh" else self._last_refresh
        if outcome.result in ("refreshed", "needs_sign_in"):
            log.info("keepalive: %s%s", outcome.result, f" ({outcome.reason})" if outcome.reason else "")
        return outcome

    async def _keepalive(self) -> None:
        retry = keepalive.FIRST_RETRY
        while True:
            try:
                account = await trio.to_thread.run_sync(store.read_account, self.root)
            except (HermesError, OSError) as exc:
                log.warning("keepalive: the account store is unreadable (%s)", getattr(exc, "code", type(exc).__name__))
                account = None
            wait = keepalive.wait_before_refresh(account, now=time.time())
            if wait <= 0:
                outcome = await self._refresh_now(force=False)
                wait, retry = keepalive.after_refresh(outcome, retry)
                if outcome.result == "failed":
                    log.warning("keepalive: refresh failed (%s); again in %gs", outcome.reason, wait)
            self._next_check = time.time() + wait
            with trio.move_on_after(wait):
                await self._wake.wait()
            self._wake = trio.Event()
