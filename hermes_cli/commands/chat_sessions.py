"""The files of ``hermes chat``: one ``<home>/chat_sessions/<ref>.json`` per chat.

The directory is 0700 and each file 0600, written atomically. A ref is
``YYYYMMDD_HHMMSS_<6 hex>`` (the Hermes Agent's session id shape, and a hook id), and a file
is read only under the name its ref gives, so a ``--resume`` value can name nothing else.

A record keeps what the chat needs to go on: the ref, when it was made and last used, the
flags it ran with, its continuation ids and a bounded transcript (the last
``MAX_TRANSCRIPT`` lines, each cut at ``MAX_LINE`` characters): only what was typed and what
the scripted engine answered, never the environment, so no key or token. It also keeps the
system prompt the chat's agent was given (``system_prompt``, as the Hermes Agent keeps its
session's), which names the session's id when the run was given ``--pass-session-id``; that
flag is each run's own, so it is written and never read back.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermes_cli.errors import CliError
from shared import homes
from shared.files import StateFileCorrupt, read_json, write_json_atomic
from shared.hook_vocabulary import MAX_CONTINUATION_IDS, is_id

DIRECTORY = "chat_sessions"
VERSION = 1
MAX_TRANSCRIPT = 200
MAX_LINE = 500
MAX_FILE_BYTES = 1 << 20
_REF = re.compile(r"[0-9]{8}_[0-9]{6}_[0-9a-f]{6}")
_TOOLSETS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class ChatSessionNotFound(CliError):
    code = "chat_session_not_found"


class ChatSessionUnreadable(CliError):
    code = "chat_session_unreadable"


@dataclass
class ChatSession:
    ref: str
    created_at: str
    updated_at: str
    toolsets: list[str] | None = None
    reasoning: str | None = None
    continuations: list[str] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    pass_session_id: bool = False

    def system_prompt(self) -> str:
        """What the agent is started with: when the chat began and, with ``--pass-session-id``,
        the id it goes by now (its newest continuation after a compaction), so it can name it."""
        lines = [f"Conversation started: {self.created_at[:10]}"]
        if self.pass_session_id:
            lines.append(f"Session ID: {self.continuations[-1] if self.continuations else self.ref}")
        return "\n".join(lines)

    def note(self, line: str) -> None:
        """Add a transcript line (cut to ``MAX_LINE``), keeping the last ``MAX_TRANSCRIPT``."""
        self.transcript.append(line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…")
        del self.transcript[:-MAX_TRANSCRIPT]

    def continue_as(self, ids: list[str]) -> None:
        self.continuations = [*self.continuations, *ids][-MAX_CONTINUATION_IDS:]


def is_ref(value: object) -> bool:
    return isinstance(value, str) and _REF.fullmatch(value) is not None and is_id(value)


def new_ref() -> str:
    return f"{time.strftime('%Y%m%d_%H%M%S')}_{secrets.token_hex(3)}"


def _now() -> str:
    # UTC with microseconds: the strings sort as the times do (``latest``).
    return datetime.now(UTC).isoformat(timespec="microseconds")


def directory(home: Path) -> Path:
    return Path(home) / DIRECTORY


def _ensure_directory(home: Path) -> Path:
    path = directory(homes.ensure_home(home))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # the umask may have taken owner bits
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise ChatSessionUnreadable(f"{path} is not a directory", detail={"path": str(path)})
    return path


def create(
    home: Path, *, toolsets: list[str] | None, reasoning: str | None, pass_session_id: bool = False
) -> ChatSession:
    folder = _ensure_directory(home)
    ref = new_ref()
    while (folder / f"{ref}.json").exists():  # two chats started in one second
        ref = new_ref()
    now = _now()
    session = ChatSession(ref, now, now, toolsets, reasoning, pass_session_id=pass_session_id)
    save(home, session)
    return session


def save(home: Path, session: ChatSession) -> None:
    session.updated_at = _now()
    record = {"v": VERSION, **asdict(session), "system_prompt": session.system_prompt()}
    write_json_atomic(_ensure_directory(home) / f"{session.ref}.json", record, secret=True)


def load(home: Path, ref: str) -> ChatSession:
    """The chat ``ref`` of ``home``; ChatSessionNotFound for a ref that is none or names no
    file, ChatSessionUnreadable for a file that is not a chat record."""
    if not is_ref(ref):
        raise ChatSessionNotFound(
            f"{ref!r} is not a chat session ref (expected YYYYMMDD_HHMMSS_xxxxxx)", detail={"ref": ref}
        )
    path = directory(home) / f"{ref}.json"
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise ChatSessionNotFound(f"no chat session {ref} in {home}", detail={"ref": ref}) from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        raise ChatSessionUnreadable(
            f"chat session {ref} is not a regular file of at most {MAX_FILE_BYTES} bytes", detail={"ref": ref}
        )
    try:
        return _record(ref, read_json(path))
    except StateFileCorrupt as exc:
        raise ChatSessionUnreadable(f"chat session {ref} is unreadable: {exc.reason}", detail={"ref": ref}) from None
    except OSError as exc:
        raise ChatSessionUnreadable(f"chat session {ref} is unreadable: {exc.strerror}", detail={"ref": ref}) from None


def latest(home: Path) -> ChatSession:
    """The chat of ``home`` used last (``--continue``); ChatSessionNotFound when there is none."""
    try:
        names = [entry.name for entry in os.scandir(directory(home)) if entry.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        names = []
    found = []
    for name in names:
        ref = name.removesuffix(".json")
        if name.endswith(".json") and is_ref(ref):
            try:
                found.append(load(home, ref))
            except ChatSessionUnreadable:
                continue  # an unreadable one is not the last chat
    if not found:
        raise ChatSessionNotFound(f"no chat session to continue in {home}", detail={"home": str(home)})
    return max(found, key=lambda session: (session.updated_at, session.ref))


def _record(ref: str, data: Any) -> ChatSession:
    def bad(what: str) -> ChatSessionUnreadable:
        return ChatSessionUnreadable(f"chat session {ref} is unreadable: {what}", detail={"ref": ref})

    if data.get("v") != VERSION or data.get("ref") != ref:
        raise bad(f"not a version {VERSION} record of this ref")
    times = [data.get("created_at"), data.get("updated_at")]
    if not all(isinstance(t, str) and len(t) <= 64 for t in times):
        raise bad("created_at and updated_at must be strings")
    toolsets, reasoning = data.get("toolsets"), data.get("reasoning")
    if toolsets is not None and not (
        isinstance(toolsets, list) and all(isinstance(t, str) and _TOOLSETS.fullmatch(t) for t in toolsets)
    ):
        raise bad("toolsets must be a list of toolset names")
    if reasoning is not None and not (isinstance(reasoning, str) and len(reasoning) <= 16):
        raise bad("reasoning must be a word")
    continuations, transcript = data.get("continuations", []), data.get("transcript", [])
    if not (isinstance(continuations, list) and all(is_id(c) for c in continuations)):
        raise bad("continuations must be a list of ids")
    if not (isinstance(transcript, list) and all(isinstance(line, str) for line in transcript)):
        raise bad("transcript must be a list of strings")
    session = ChatSession(ref, times[0], times[1], toolsets, reasoning)
    session.continue_as(continuations)
    for line in transcript:
        session.note(line)
    return session
