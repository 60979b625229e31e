"""The portal's failures, typed so that a caller decides what to retry.

``PortalUnreachable`` (transport), ``PortalBusy`` (429/5xx, with the server's
``Retry-After``), ``PortalTLSError``, ``PortalInvalidAnswer`` (an answer this side cannot
use) and ``PortalRefused`` (an OAuth error answer; ``.error`` is its code). No message ever
carries a token. No HTTP client here: the rules that read these failures (the sign-in's
device flow, the refresh) are imported and tested without one.
"""

from __future__ import annotations

from nous.errors import NousError


class PortalError(NousError):
    code = "portal_error"


class PortalUnreachable(PortalError):
    """No answer at all. ``why`` says how, as one of the codes below, so a surface can put
    it in words a person understands (never the transport's exception)."""

    code = "portal_unreachable"
    CONNECTION_REFUSED = "connection_refused"
    NAME_NOT_RESOLVED = "name_not_resolved"
    TIMED_OUT = "timed_out"
    CONNECTION_DROPPED = "connection_dropped"
    NO_CONNECTION = "no_connection"
    # Each ``why`` in words that follow "the portal": never the transport's exception.
    WORDS = {
        CONNECTION_REFUSED: "refused the connection",
        NAME_NOT_RESOLVED: "could not be found (its name did not resolve)",
        TIMED_OUT: "did not answer in time",
        CONNECTION_DROPPED: "dropped the connection",
        NO_CONNECTION: "could not be connected to",
    }

    def __init__(self, message: str, *, why: str = NO_CONNECTION):
        super().__init__(message, detail={"why": why})
        self.why = why


class PortalBusy(PortalError):
    code = "portal_busy"

    def __init__(self, message: str, *, status: int, retry_after: float):
        super().__init__(message, detail={"status": status, "retry_after": retry_after})
        self.status = status
        self.retry_after = retry_after


class PortalTLSError(PortalError):
    code = "tls_failed"


class PortalInvalidAnswer(PortalError):
    code = "portal_invalid_answer"


class PortalRefused(PortalError):
    """An OAuth error answer (4xx with ``{"error": ...}``)."""

    code = "portal_refused"

    def __init__(self, error: str, status: int):
        # The message is for people: the server's code stays in ``error`` and the detail.
        super().__init__(f"the portal refused the request (HTTP {status})", detail={"error": error, "status": status})
        self.error = error
        self.status = status
