"""The device-code sign-in, one composition: precondition, code, poll, save, settle.

``run_sign_in`` emits ``Code`` and ``Waiting`` (and ``Retrying`` while a busy or unreachable
portal is asked again) and returns exactly one terminal state; no failure escapes as an
exception. The token poll runs on one deadline (the code's own
expiry), and a watcher checks the cancel flag several times a second, so a cancel ends even
a request in flight; what each of the portal's answers means is ``device_flow``'s to say.
The store's lock is held only around the precondition and the save, never across a network
wait. A cancel always wins over a save that has not begun: with a persist guard the last
check and the save are one step under the store's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import trio

from nous import portal as portal_api
from nous import store
from nous.access_token import InvalidAccessToken, read_claims
from nous.guest_handoff import records as handoff_records
from nous.guest_handoff.attempts import DrainReport, drain
from nous.guest_handoff.rules import sign_in_lines
from nous.portal_errors import PortalError, PortalTLSError
from services.auth_worker import device_flow, settle
from services.auth_worker.states import (
    AlreadySignedIn,
    Cancelled,
    Code,
    Completed,
    Failed,
    Reason,
    SignInState,
    Waiting,
)
from shared.errors import HermesError

log = logging.getLogger(__name__)

# How often the cancel flag is looked at while the portal is asked (the rule: at least once a second).
CANCEL_CHECK = 0.2
# How long asking for the tier's recommended model may take before the table's answer is used.
RECOMMENDED_MODEL_SECONDS = 10.0
# How long a sign-in waits for a guest's claim another process has in flight, re-reading the
# records this often: a claim answers within its own request's bounds, well inside this.
HANDOFF_WAIT = 15.0
HANDOFF_REREAD = 0.25

T = TypeVar("T")
Emit = Callable[[SignInState], Awaitable[None]]


class CancelFlag:
    """A sign-in's cancel, shared between the cancel op and the save.

    ``commit`` is the persist guard: under the store's lock it either sees the cancel (and
    the save is abandoned) or marks the save as begun (and a later cancel reports it lost).
    Both take a thread lock for an instant, so either may be called from a worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._committed = False

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> bool:
        """True when the cancel won (nothing will be saved); False once the save had begun."""
        with self._lock:
            if self._committed:
                return False
            self._cancelled = True
            return True

    def commit(self) -> bool:
        with self._lock:
            if self._cancelled:
                return False
            self._committed = True
            return True


@dataclass(frozen=True)
class SignInRequest:
    sign_in_id: str
    root: Path
    home: Path  # the profile whose config settles onto the account
    portal_url: str
    ca_bundle: str | None
    replace_account: bool = False


async def run_sign_in(
    request: SignInRequest,
    emit: Emit,
    cancel: CancelFlag,
    *,
    persist_guard: Callable[[], bool] | None = None,
) -> SignInState:
    try:
        return await _sign_in(request, emit, cancel, persist_guard)
    except Exception:  # the rule: nothing escapes; the worker keeps serving
        log.exception("sign-in %s failed unexpectedly", request.sign_in_id)
        return Failed(Reason.INTERNAL)


async def _sign_in(
    request: SignInRequest, emit: Emit, cancel: CancelFlag, persist_guard: Callable[[], bool] | None
) -> SignInState:
    try:
        account = await trio.to_thread.run_sync(store.read_account, request.root)
    except (HermesError, OSError):
        return Failed(Reason.STORE_UNREADABLE)
    if account is not None and not account.get("needs_sign_in") and not request.replace_account:
        return AlreadySignedIn(email=str(account.get("email")))
    try:
        tls = await trio.to_thread.run_sync(portal_api.tls_context, request.ca_bundle)
    except PortalTLSError:
        return Failed(Reason.TLS_FAILED)

    async with portal_api.Portal(request.portal_url, tls) as portal:
        code = await _until_cancelled(cancel, lambda: _device_code(portal, request.sign_in_id, emit))
        if isinstance(code, SignInState):
            return code
        await emit(
            Code(
                sign_in_id=request.sign_in_id,
                user_code=code.user_code,
                verification_uri=code.verification_uri,
                verification_uri_complete=code.verification_uri_complete,
                expires_in=code.expires_in,
            )
        )
        await emit(Waiting(sign_in_id=request.sign_in_id))
        tokens = await _until_cancelled(cancel, lambda: _poll(portal, code, request.sign_in_id, emit))
        if isinstance(tokens, SignInState):
            return tokens
        try:
            claims = read_claims(tokens.access_token)
        except InvalidAccessToken:
            return Failed(Reason.INVALID_TOKEN)

        record = store.account_record(
            sub=claims.sub,
            email=claims.email,
            tier=claims.tier,
            host=claims.host,
            access_token=tokens.access_token,
            refresh_token=tokens.refresh_token,
            expires_in=tokens.expires_in,
            portal=request.portal_url,
            ca_bundle=request.ca_bundle,
        )
        if cancel.cancelled():
            return Cancelled()
        guard = persist_guard or (lambda: not cancel.cancelled())
        try:
            await trio.to_thread.run_sync(store.save_account, request.root, request.home, record, guard)
        except store.SaveAborted:
            return Cancelled()
        except (HermesError, OSError) as exc:
            log.warning("sign-in %s: the account could not be saved: %s", request.sign_in_id, _safe(exc))
            return Failed(Reason.SAVE_FAILED)

        # The locks are released: the guest's apps move (bounded), then settle, exactly once.
        handoff = await _drain_handoffs(request)
        try:
            model = await _recommended(portal, tokens.access_token, claims.tier)
            settled = await trio.to_thread.run_sync(settle.settle_after_upgrade, request.home, claims, model)
        except (HermesError, OSError) as exc:
            log.warning("sign-in %s: settling the config failed: %s", request.sign_in_id, _safe(exc))
            return Failed(Reason.SETTLE_FAILED)
    return Completed(
        email=claims.email,
        tier=claims.tier,
        settled=settled,
        handoff=tuple(handoff.lines),
        handoff_status=handoff.records[0] if handoff.records else None,
    )


async def _until_cancelled(cancel: CancelFlag, work: Callable[[], Awaitable[T]]) -> T | Cancelled:
    """Run ``work`` until it returns, or ``Cancelled()`` once the flag is raised."""
    result: list[T | Cancelled] = [Cancelled()]
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            result[0] = await work()
            nursery.cancel_scope.cancel()

        async def watch() -> None:
            while not cancel.cancelled():
                await trio.sleep(CANCEL_CHECK)
            nursery.cancel_scope.cancel()

        nursery.start_soon(run)
        nursery.start_soon(watch)
    return Cancelled() if cancel.cancelled() else result[0]


async def _device_code(portal: portal_api.Portal, sign_in_id: str, emit: Emit) -> portal_api.DeviceCode | Failed:
    """Ask for a device code, retrying a busy or unreachable portal within one budget, and
    saying so each time."""
    retries = device_flow.DeviceCodeRetries()
    with trio.move_on_after(device_flow.DEVICE_CODE_BUDGET):
        while True:
            try:
                return await portal.device_code()
            except PortalError as exc:
                step = device_flow.after_device_code_error(retries, exc)
                if isinstance(step, Failed):
                    return step
                retries = step
                await emit(device_flow.retrying(sign_in_id, exc, retries.attempt, retries.wait))
            await trio.sleep(retries.wait)
    return retries.given_up


async def _poll(
    portal: portal_api.Portal, code: portal_api.DeviceCode, sign_in_id: str, emit: Emit
) -> portal_api.TokenSet | SignInState:
    """Poll the token endpoint until the code is approved, refused or expired (one deadline).
    A busy or unreachable portal shows ``Retrying``, and ``Waiting`` again once it answers."""
    poll = device_flow.Poll.start(code.interval)
    with trio.move_on_after(device_flow.poll_seconds(code.expires_in)):
        while True:
            await trio.sleep(poll.wait)
            try:
                return await portal.poll_token(code.device_code)
            except PortalError as exc:
                step = device_flow.after_poll_error(poll, exc)
                if isinstance(step, SignInState):
                    return step
                if step.failures:
                    await emit(device_flow.retrying(sign_in_id, exc, step.failures, step.wait))
                elif poll.failures:
                    await emit(Waiting(sign_in_id=sign_in_id))
                poll = step
    return device_flow.poll_expired(poll)


async def _drain_handoffs(request: SignInRequest) -> DrainReport:
    """Move a replaced guest's apps now, if any; a drain that fails leaves its record for the
    retry worker and never fails a sign-in whose account is saved. A claim another process
    (the retry worker) has in flight is waited for, bounded, so the sign-in shows its outcome."""
    try:
        report = await trio.to_thread.run_sync(drain, request.root)
    except Exception:
        log.exception("sign-in %s: the guest handoff drain failed", request.sign_in_id)
        return DrainReport()
    with trio.move_on_after(HANDOFF_WAIT):
        while _held(report):
            await trio.sleep(HANDOFF_REREAD)
            try:
                report.records = await trio.to_thread.run_sync(handoff_records.public_records, request.root)
            except (HermesError, OSError):
                break  # what the drain saw stands
    for record in report.records:
        record["lines"] = sign_in_lines(record)
    return report


def _held(report: DrainReport) -> bool:
    return any(record["state"] == "reserved" for record in report.records)


async def _recommended(portal: portal_api.Portal, access_token: str, tier: str) -> str:
    try:
        with trio.move_on_after(RECOMMENDED_MODEL_SECONDS):
            return await portal.recommended_default(access_token)
    except PortalError:
        pass
    return settle.recommended_nous_default_model(tier)


def _safe(exc: BaseException) -> str:
    """An error for the log: its type and code, never its text (which may quote a server's answer)."""
    return f"{type(exc).__name__}({getattr(exc, 'code', '')})"
