"""What asking another host's service came to (``shared.mesh_hosts``), judged from its answer
or the typed error it ended with; no I/O.

- ``ok``: it answered;
- ``offline``: nothing answered within the bound, or the connection dropped: over TCP nobody
  refuses a connection for a service that is not there, so a host that is down, cut off or
  whose service is stopped all look the same (``shared.protocol.UNANSWERED``);
- ``refused``: a service is there but the handshake was refused: the key this home trusts is
  not the host's, or the host does not authorize this home's client key
  (``shared.transport.HANDSHAKE_REFUSALS``);
- ``untrusted``: this home trusts no key for the service (or has no client key), so it was
  not asked;
- ``error``: it answered with another typed error.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from shared.errors import HermesError
from shared.protocol import UNANSWERED
from shared.transport import HANDSHAKE_REFUSALS

OK, OFFLINE, REFUSED, UNTRUSTED, ERROR = "ok", "offline", "refused", "untrusted", "error"
# The key store's code for a key it does not hold (``shared.transport.curve_keys``, which
# needs pyzmq: not imported for a code).
KEY_MISSING = "curve_key_missing"


class Outcome(NamedTuple):
    state: str
    answer: Any = None  # the answer, when ``ok``
    error: HermesError | None = None  # the typed error it ended with, otherwise

    @property
    def code(self) -> str | None:
        return None if self.error is None else self.error.code

    @property
    def message(self) -> str:
        return "" if self.error is None else self.error.message


def judge(result: Any) -> Outcome:
    """The outcome of one call that answered ``result`` (a ``HermesError`` when it failed)."""
    if not isinstance(result, HermesError):
        return Outcome(OK, answer=result)
    if result.code in HANDSHAKE_REFUSALS:
        return Outcome(REFUSED, error=result)
    if result.code in UNANSWERED:
        return Outcome(OFFLINE, error=result)
    if result.code == KEY_MISSING:
        return Outcome(UNTRUSTED, error=result)
    return Outcome(ERROR, error=result)
