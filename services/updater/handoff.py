"""The hand-over from the old updater to the completion in the new tree.

A FROZEN COMPATIBILITY SURFACE: an updater of an older release writes the request and then
runs ``python -m services.updater.completion REQUEST`` from the NEW tree, so every newer
release must keep reading every request schema listed here, and keep the entry module's name.
``tests/compat/`` pins examples of each schema.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shared.errors import HermesError
from shared.files import read_json, write_json_atomic

REQUEST_SCHEMA = 1
SUPPORTED_REQUEST_SCHEMAS = frozenset({1})
RESULT_SCHEMA = 1
ENTRY_MODULE = "services.updater.completion"


class BadRequest(HermesError):
    code = "completion_request_invalid"


@dataclass(frozen=True)
class Request:
    update_id: str
    nonce: str
    root: str
    install_root: str
    before: str | None
    after: str | None
    result_path: str
    live_profiles: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    schema: int = REQUEST_SCHEMA

    @staticmethod
    def new(**fields: Any) -> Request:
        return Request(nonce=secrets.token_hex(16), **fields)

    def write(self, path: Path) -> None:
        write_json_atomic(path, asdict(self), secret=True)  # the nonce is a capability

    @staticmethod
    def read(path: Path) -> Request:
        data = read_json(path)
        schema = data.get("schema")
        if schema not in SUPPORTED_REQUEST_SCHEMAS:
            raise BadRequest(f"request schema {schema!r} is not one this release reads", detail={"path": str(path)})
        strings = ("update_id", "nonce", "root", "install_root", "result_path")
        if not all(isinstance(data.get(k), str) and data[k] for k in strings):
            raise BadRequest(f"request {path} lacks one of {', '.join(strings)}", detail={"path": str(path)})
        for key in ("before", "after"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise BadRequest(f"request field {key!r} must be a commit or null", detail={"path": str(path)})
        return Request(
            update_id=data["update_id"],
            nonce=data["nonce"],
            root=data["root"],
            install_root=data["install_root"],
            before=data.get("before"),
            after=data.get("after"),
            result_path=data["result_path"],
            live_profiles=[p for p in data.get("live_profiles", []) if isinstance(p, str)],
            options=data.get("options") if isinstance(data.get("options"), dict) else {},
            schema=schema,
        )


def read_result(path: Path, request: Request) -> dict[str, Any] | None:
    """The completion's answer, only if it is for this very request (id AND nonce)."""
    try:
        result = read_json(path, default=None)
    except HermesError:
        return None
    if not result or result.get("update_id") != request.update_id or result.get("nonce") != request.nonce:
        return None
    return result
