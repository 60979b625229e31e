"""The one base class of every error a hermes-mesh process reports.

A ``code`` is a stable snake_case identifier that clients branch on; the message is for
people and may change. Subclasses set ``code`` as a class attribute.

Every error belongs to one family: a direct subclass of ``HermesError`` declared with
``family=True``, one per domain (the transport, the gateway, the update, ...), so a caller can
catch a whole domain. A code is written once; another class that carries it inherits it or
names where it is written. docs/errors.md lists every code, by family.
"""

from __future__ import annotations

from typing import Any, ClassVar


class HermesError(Exception):
    code: str = "internal_error"
    family: ClassVar[type[HermesError] | None] = None  # the family base this error belongs to

    def __init_subclass__(cls, *, family: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if family:
            cls.family = cls

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def to_dict(self) -> dict[str, Any]:
        """The wire shape of the error: ``{"code", "message"[, "detail"]}``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            out["detail"] = self.detail
        return out


class TransportError(HermesError, family=True):
    """Reaching a service: the wire, its keys and CURVE, TCP, and starting a service on demand."""


class HomeError(HermesError, family=True):
    """The install's homes on disk: state files and their locks, config, ``.env``, ids, ``run/``."""


def failure_reason(exc: BaseException) -> str:
    """Why a step failed, for a receipt or an outcome: a ``HermesError``'s own message (written
    for people, so no class name); anything else is a bug, named with its type for the report."""
    return exc.message if isinstance(exc, HermesError) else f"{type(exc).__name__}: {exc}"
