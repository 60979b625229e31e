"""The one base class of every error a hermes-mesh process reports.

A ``code`` is a stable snake_case identifier that clients branch on; the message is for
people and may change. Subclasses set ``code`` as a class attribute.
"""

from __future__ import annotations

from typing import Any


class HermesError(Exception):
    code: str = "internal_error"

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


def failure_reason(exc: BaseException) -> str:
    """Why a step failed, for a receipt or an outcome: a ``HermesError``'s own message (written
    for people, so no class name); anything else is a bug, named with its type for the report."""
    return exc.message if isinstance(exc, HermesError) else f"{type(exc).__name__}: {exc}"
