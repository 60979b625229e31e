"""The one error every part of the simulator raises to answer a request with an error."""

from __future__ import annotations

from typing import Any


# Not a HermesError: the simulated portal's HTTP answer, in the portal's own words, not ours.
class ApiError(Exception):
    """An error answer: ``status`` with the JSON body ``{"error", "error_description"}``."""

    def __init__(self, status: int, error: str, description: str = "", *, headers: dict[str, str] | None = None):
        super().__init__(f"{status} {error}")
        self.status = status
        self.error = error
        self.description = description or error.replace("_", " ")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "error_description": self.description}


def invalid_request(description: str) -> ApiError:
    return ApiError(400, "invalid_request", description)


def invalid_token() -> ApiError:
    # RFC 6750 3.1: a rejected bearer token is answered with a challenge naming the error.
    return ApiError(
        401,
        "invalid_token",
        "missing, invalid, expired or revoked access token",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )
