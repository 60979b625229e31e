"""The words of a hook report, one definition for the client that sends it (``shared.hooks``)
and the parser that takes it (``shared.hook_reports``). No I/O.

A report is payload-free by construction: every field is an enum, a number or an id, and an
id is 1 to 128 of ``A-Z a-z 0-9 . _ : -`` (no space, no slash: no prompt, path or command
line fits). The frame is one msgpack map::

    {"v": 1, "kind": ..., "session": ..., "pid": ..., "start_time": ..., "at": ..., <kind fields>}
"""

from __future__ import annotations

import re
from collections.abc import Set
from typing import TypeGuard

from shared.errors import HermesError

VERSION = 1
ENVELOPE = ("v", "kind", "session", "pid", "start_time", "at")
MAX_REPORT_BYTES = 1024
MAX_CONTINUATION_IDS = 16
MAX_LAUNCH_PATH = 4096
ACTIVITY_STATES = frozenset({"working", "idle"})
ATTENTION_REASONS = frozenset({"owner_approval"})
RELEASE_REASONS = frozenset({"session_end", "agent_exit", "handoff"})
LAUNCH_KEYS = frozenset({"exe", "script", "root_pid"})

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class HookReportError(HermesError, family=True):
    """A hook report: the client's frame, and the receiver's check of it."""


def is_id(value: object) -> TypeGuard[str]:
    """True for a str (not a subclass, which may carry anything in its methods) that is an id
    whole: ``fullmatch``, so a trailing newline is not an id."""
    return type(value) is str and _ID.fullmatch(value) is not None


def is_one_of(value: object, words: Set[str]) -> TypeGuard[str]:
    """True for a str that is one of ``words`` (anything unhashable is simply not one)."""
    return type(value) is str and value in words
