"""The sign-in's states and the words every surface shows for them.

A sign-in yields ``Code``, then ``Waiting``, then exactly one terminal state; ``Retrying``
may come before ``Code`` (asking for a code) or after ``Waiting`` (the poll, which shows
``Waiting`` again once the portal answers). Each state carries its own ``copy`` (the chat
form: never a raw exception, a URL or a ``hermes`` command) and ``copy_terminal`` (the
terminal form, which may name both), so no surface maps a reason to a string.

``WorkerLost`` is the one terminal state a client makes, never the worker: the worker stopped
answering before it said how the sign-in ended, so the client says what the account store
holds (``worker_lost``). No I/O here: the rules are tested without sockets or clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from nous.guest_handoff.rules import SETTLED as HANDOFF_SETTLED
from nous.portal_errors import PortalUnreachable


class Reason:
    """Why a sign-in ``Failed``: stable codes that scripts branch on."""

    ACCESS_DENIED = "access_denied"
    PORTAL_UNREACHABLE = "portal_unreachable"
    PORTAL_REFUSED = "portal_refused"
    PORTAL_INVALID_ANSWER = "portal_invalid_answer"
    TLS_FAILED = "tls_failed"
    SAVE_FAILED = "save_failed"
    SETTLE_FAILED = "settle_failed"
    INVALID_TOKEN = "invalid_token"
    STORE_UNREADABLE = "store_unreadable"
    INTERNAL = "internal_error"


# The chat form and the terminal form of each failure reason.
_FAILED_COPY: dict[str, tuple[str, str]] = {
    Reason.ACCESS_DENIED: (
        "The sign-in was declined. Nothing was saved.",
        "Sign-in declined in the browser. Nothing was saved.",
    ),
    Reason.PORTAL_UNREACHABLE: (
        "Sign-in could not reach Nous. Check the connection and try again.",
        "Sign-in failed: the Nous portal could not be reached. Check the network and "
        "HERMES_PORTAL_URL, then run `hermes auth login nous` again.",
    ),
    Reason.PORTAL_REFUSED: (
        "Nous refused the sign-in. Try again in a moment.",
        "Sign-in failed: the Nous portal refused the request. Run `hermes auth login nous` again.",
    ),
    Reason.PORTAL_INVALID_ANSWER: (
        "Nous answered in a way this version does not understand. Try again later.",
        "Sign-in failed: the Nous portal's answer was not understood. Check HERMES_PORTAL_URL, "
        "or update with `hermes update`.",
    ),
    Reason.TLS_FAILED: (
        "The secure connection to Nous could not be verified.",
        "Sign-in failed: the portal's TLS certificate could not be verified. Check HERMES_CA_BUNDLE.",
    ),
    Reason.SAVE_FAILED: (
        "You signed in, but the account could not be saved. Try again.",
        "Sign-in failed: the account could not be saved to this install. Check `hermes doctor`, "
        "then run `hermes auth login nous` again.",
    ),
    Reason.SETTLE_FAILED: (
        "You are signed in, but the model settings could not be updated.",
        "Signed in, but the configuration could not be moved to the account's model. "
        "Check config.yaml with `hermes doctor`.",
    ),
    Reason.STORE_UNREADABLE: (
        "This install's sign-in records could not be read, so nothing was changed.",
        "Sign-in stopped: the shared Nous account store could not be read. Check `hermes doctor`.",
    ),
    Reason.INTERNAL: (
        "Something went wrong during sign-in. Nothing was saved. Try again.",
        "Sign-in failed on an internal error; the auth worker's log has the details. "
        "Run `hermes auth login nous` again.",
    ),
    Reason.INVALID_TOKEN: (
        "Nous sent back a sign-in that could not be read. Try again.",
        "Sign-in failed: the access token from the portal could not be read. Run `hermes auth login nous` again.",
    ),
}


@dataclass(frozen=True)
class SignInState:
    name: ClassVar[str] = ""
    terminal: ClassVar[bool] = False

    @property
    def copy(self) -> str:
        raise NotImplementedError

    @property
    def copy_terminal(self) -> str:
        return self.copy

    def fields(self) -> dict[str, Any]:
        return {}

    def to_wire(self) -> dict[str, Any]:
        return {"state": self.name, **self.fields(), "copy": self.copy, "copy_terminal": self.copy_terminal}


@dataclass(frozen=True)
class Code(SignInState):
    """A device code to show: the user approves it in a browser."""

    name: ClassVar[str] = "Code"
    sign_in_id: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: float

    @property
    def copy(self) -> str:
        return f"To sign in to Nous, open the sign-in page and enter the code {self.user_code}."

    @property
    def copy_terminal(self) -> str:
        return f"Open {self.verification_uri_complete}\nand confirm the code {self.user_code}."

    def fields(self) -> dict[str, Any]:
        return {
            "sign_in_id": self.sign_in_id,
            "user_code": self.user_code,
            "verification_uri": self.verification_uri,
            "verification_uri_complete": self.verification_uri_complete,
            "expires_in": self.expires_in,
        }


@dataclass(frozen=True)
class Waiting(SignInState):
    name: ClassVar[str] = "Waiting"
    sign_in_id: str

    @property
    def copy(self) -> str:
        return "Waiting for you to approve the sign-in."

    def fields(self) -> dict[str, Any]:
        return {"sign_in_id": self.sign_in_id}


# Why a sign-in is ``Retrying``: how the portal gave no answer (``PortalUnreachable.why``), or busy.
RETRY_BUSY = "busy"
_RETRY_WORDS = {**PortalUnreachable.WORDS, RETRY_BUSY: "is busy"}


@dataclass(frozen=True)
class Retrying(SignInState):
    """The portal could not be asked just now; the sign-in asks again in ``retry_in`` seconds."""

    name: ClassVar[str] = "Retrying"
    sign_in_id: str
    reason: str
    attempt: int  # the failures in a row so far, this one included
    retry_in: float

    @property
    def copy(self) -> str:
        why = _RETRY_WORDS.get(self.reason, _RETRY_WORDS[PortalUnreachable.NO_CONNECTION])
        return f"Sign-in: the Nous portal {why}; trying again in {max(1, round(self.retry_in))} s."

    def fields(self) -> dict[str, Any]:
        return {
            "sign_in_id": self.sign_in_id,
            "reason": self.reason,
            "attempt": self.attempt,
            "retry_in": self.retry_in,
        }


@dataclass(frozen=True)
class Completed(SignInState):
    name: ClassVar[str] = "Completed"
    terminal: ClassVar[bool] = True
    email: str
    tier: str
    handoff: tuple[str, ...] = ()
    handoff_status: dict[str, Any] | None = None
    settled: str = "kept"  # what settle_after_upgrade did to the config: "moved" or "kept"

    @property
    def copy(self) -> str:
        return "\n".join((f"Signed in to Nous as {self.email}.", *self.handoff))

    @property
    def copy_terminal(self) -> str:
        if self.handoff_status is None or self.handoff_status.get("state") in HANDOFF_SETTLED:
            return self.copy
        return f"{self.copy}\nRun `hermes auth status nous` to see how the move ends."

    def fields(self) -> dict[str, Any]:
        return {
            "email": self.email,
            "tier": self.tier,
            "handoff": list(self.handoff),
            "handoff_status": self.handoff_status,
            "settled": self.settled,
        }


@dataclass(frozen=True)
class Cancelled(SignInState):
    name: ClassVar[str] = "Cancelled"
    terminal: ClassVar[bool] = True

    @property
    def copy(self) -> str:
        return "Sign-in cancelled. Nothing was saved."


@dataclass(frozen=True)
class TimedOut(SignInState):
    name: ClassVar[str] = "TimedOut"
    terminal: ClassVar[bool] = True

    @property
    def copy(self) -> str:
        return "The sign-in code expired before it was approved. Start the sign-in again."

    @property
    def copy_terminal(self) -> str:
        return "The sign-in code expired before it was approved. Run `hermes auth login nous` again."


@dataclass(frozen=True)
class Failed(SignInState):
    name: ClassVar[str] = "Failed"
    terminal: ClassVar[bool] = True
    reason: str

    @property
    def copy(self) -> str:
        return _FAILED_COPY.get(self.reason, _FAILED_COPY[Reason.PORTAL_REFUSED])[0]

    @property
    def copy_terminal(self) -> str:
        return _FAILED_COPY.get(self.reason, _FAILED_COPY[Reason.PORTAL_REFUSED])[1]

    def fields(self) -> dict[str, Any]:
        return {"reason": self.reason}


@dataclass(frozen=True)
class AlreadySignedIn(SignInState):
    name: ClassVar[str] = "AlreadySignedIn"
    terminal: ClassVar[bool] = True
    email: str

    @property
    def copy(self) -> str:
        return f"This install is already signed in to Nous as {self.email}."

    @property
    def copy_terminal(self) -> str:
        return (
            f"Already signed in to Nous as {self.email}. "
            "Run `hermes auth login nous --replace` to sign in with another account."
        )

    def fields(self) -> dict[str, Any]:
        return {"email": self.email}


@dataclass(frozen=True)
class WorkerLost(SignInState):
    """The auth worker stopped before it said how the sign-in ended. ``account`` is the store's
    public view now (``None``: unreadable); ``saved`` whether it holds an account saved during
    this sign-in (``None``: not known)."""

    name: ClassVar[str] = "WorkerLost"
    terminal: ClassVar[bool] = True
    account: dict[str, Any] | None
    saved: bool | None

    @property
    def copy(self) -> str:
        if self.saved:
            return f"The sign-in was cut short, but this install is signed in to Nous as {self._email}."
        if self.saved is None:
            return "The sign-in was cut short, and whether it was saved is not known."
        return "The sign-in was cut short and nothing was saved. Try again."

    @property
    def copy_terminal(self) -> str:
        stopped = "The auth worker stopped before the sign-in finished."
        if self.saved:
            return (
                f"{stopped} This install is signed in to Nous as {self._email} (saved just now); its model "
                "settings and guest apps may not have moved yet. Check with `hermes auth status nous`."
            )
        if self.saved is None:
            return f"{stopped} The account store could not be read: check `hermes auth status nous`."
        return f"{stopped} Nothing was saved. Run `hermes auth login nous` again."

    @property
    def _email(self) -> str:
        return str((self.account or {}).get("email"))

    def fields(self) -> dict[str, Any]:
        return {"account": self.account, "saved": self.saved}


def worker_lost(before: dict[str, Any] | None, now: dict[str, Any] | None) -> WorkerLost:
    """What to report when the worker is gone: the store's public views from when the sign-in
    started (``before``) and now (``None``: unreadable). An account was saved during the
    sign-in when the store now holds one that was not there before (another ``sub`` or
    another ``saved_at``)."""
    if now is None:
        return WorkerLost(account=None, saved=None)
    if not now.get("sub"):
        return WorkerLost(account=now, saved=False)
    mark = (now.get("sub"), now.get("saved_at"))
    return WorkerLost(account=now, saved=before is None or mark != (before.get("sub"), before.get("saved_at")))


TERMINAL_STATES = ("Completed", "Cancelled", "TimedOut", "Failed", "AlreadySignedIn", "WorkerLost")
