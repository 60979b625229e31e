"""The policy the plugin runs under, and the way it reaches the daemon.

Where this project's packages import, the policy is read and judged by them, in process, and
calls go over ZeroMQ. Elsewhere (any other Hermes) the plugin reads only the policy's
``operator_cli`` (from the same owner-private file, opened the same careful way) and asks that
CLI for the policy as the same rules judged it; calls then go through the CLI. Either way a
policy loads by exactly one set of rules: ``shared.operator.policy``'s.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any

from . import cli_runner
from .contract import MAX_POLICY_BYTES, OPEN_TO_OTHERS
from .transport import Cli, Direct, Transport

SETTINGS_TIMEOUT = 10.0  # seconds the CLI has to judge the policy at registration
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class Settings:
    """The policy's fields, as ``shared.operator.policy.Policy`` names them."""

    daemon_endpoint: str
    protocol_min: int
    protocol_max: int
    access_mode: str
    allowed_hosts: tuple[str, ...]
    tool_timeout_ms: int
    request_timeout_ms: int
    max_output_bytes: int
    max_screen_bytes: int
    max_concurrency: int
    operator_cli: str | None = None


@dataclass(frozen=True)
class Loaded:
    policy: Any  # Settings, or shared's Policy: the same fields
    window: tuple[int, int]
    transport: Transport


def load(path: str | None) -> Loaded | str:
    """The policy at ``path`` with its transport, or why there is none: ``policy_invalid``,
    ``cli_incompatible`` (no protocol in common) or ``cli_unavailable`` (no CLI to reach the
    daemon through)."""
    try:
        from shared.operator import tool_calls
        from shared.operator.policy import InvalidPolicy
        from shared.operator.policy_file import load_policy
    except ImportError:
        return _through_cli(path)
    try:
        policy = load_policy(path)
    except InvalidPolicy:
        return "policy_invalid"
    window = tool_calls.window(policy)
    if window is None:
        return "cli_incompatible"
    return Loaded(policy, window, Direct(policy.daemon_endpoint, window))


def _through_cli(path: str | None) -> Loaded | str:
    if path is None or not os.path.isabs(path):
        return "policy_invalid"
    cli = operator_cli(path)
    if cli is None:
        return "cli_unavailable"
    try:
        code, answer = cli_runner.run(cli, ["settings", "--policy", path], b"", timeout=SETTINGS_TIMEOUT)
    except cli_runner.RunFailed:
        return "cli_unavailable"
    if code != 0:
        error = answer.get("error")
        return (
            "cli_incompatible"
            if isinstance(error, dict) and error.get("code") == "cli_incompatible"
            else "policy_invalid"
        )
    try:
        fields = dict(answer["result"]["policy"])
        fields.pop("schema_version")
        fields["allowed_hosts"] = tuple(fields["allowed_hosts"])
        settings = Settings(**fields)
        window = answer["result"]["window"]
    except (KeyError, TypeError, ValueError):
        return "cli_unavailable"
    if window is None:
        return "cli_incompatible"
    return Loaded(settings, (int(window[0]), int(window[1])), Cli(cli, path))


def operator_cli(path: str) -> str | None:
    """The policy's ``operator_cli``, read only from a regular file of this user that nobody
    else may read (a path someone else could write is never run); None otherwise."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & OPEN_TO_OTHERS:
            return None
        data = os.read(fd, MAX_POLICY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        raw = json.loads(data.decode("utf-8")) if len(data) <= MAX_POLICY_BYTES else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    cli = raw.get("operator_cli") if isinstance(raw, dict) else None
    return cli if isinstance(cli, str) and os.path.isabs(cli) else None
