"""Reading the policy file: the installer's one file, owner-private, small, strict JSON.

The plugin loads it with this, and the installer, status and doctor read it back with the
same rules. What it holds is judged by ``shared.operator.policy.check``; this module only makes
sure the file is the one the installer wrote and decodes it. No message repeats what the file
holds.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from shared.operator.policy import InvalidPolicy, Policy, check

MAX_POLICY_BYTES = 64 * 1024
# O_NONBLOCK: opening a FIFO would otherwise wait for a writer (it changes nothing for a file).
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
OPEN_TO_OTHERS = 0o077
# A file its group or others may write may hold what someone else put there.
WRITABLE_BY_OTHERS = 0o022
_REINSTALL = "rewrite the policy with `hermes operator update`"


def _invalid(message: str, hint: str = _REINSTALL) -> InvalidPolicy:
    return InvalidPolicy(message, detail={"field": "policy", "hint": hint})


def _read(path: str, refused_modes: int) -> bytes:
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError:
        raise _invalid("the policy file cannot be opened (missing, unreadable or a symlink)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _invalid("the policy file is not a regular file")
        if info.st_uid != os.getuid():
            raise _invalid("the policy file belongs to another user")
        if info.st_mode & refused_modes:
            raise _invalid("the policy file is open to its group or others")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_POLICY_BYTES:
            chunk = os.read(fd, MAX_POLICY_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        raise _invalid("the policy file cannot be read") from None
    finally:
        os.close(fd)
    if size > MAX_POLICY_BYTES:
        raise _invalid(f"the policy file is larger than {MAX_POLICY_BYTES} bytes")
    return b"".join(chunks)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate key")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError("not strict JSON")  # NaN, Infinity and -Infinity


def _decode(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid("the policy file is not UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise _invalid("the policy file is not strict JSON (one object, unique keys, finite numbers)") from None


def load_policy(path: str | None, *, readable_by_others: bool = False) -> Policy:
    """The policy at the absolute ``path``; ``InvalidPolicy`` for any file or rule problem.

    ``readable_by_others`` reads a policy its group or others may read (never write): only the
    installer asks, to keep its values while it rewrites the file 0600."""
    if path is None:
        raise _invalid("the plugin's policy path was never filled in", "reinstall with `hermes operator install`")
    if type(path) is not str or not os.path.isabs(path) or "\x00" in path:
        raise _invalid("the policy path is not an absolute path", "reinstall with `hermes operator install`")
    return check(_decode(_read(path, WRITABLE_BY_OTHERS if readable_by_others else OPEN_TO_OTHERS)))
