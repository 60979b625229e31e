"""``hermes [-p PROFILE] chat [--resume REF | -c]``: the managed terminal the operator session
daemon starts on a PTY.

There is no model here. This is a line-oriented stand-in for the Hermes Agent's chat: a
scripted turn engine answers each line, so that the session daemon has a real process to drive
with the Hermes screen, lifecycle reports and recovery contract.

The screen has the Hermes Agent 0.20.0 shapes the hermes runtime's ``detect.toml`` reads: at
the bottom a prompt block, the status bar (`` ⚕ scripted │ ctx -- │ …``), a rule and the prompt,
the cursor on it. The idle prompt is ``❯ ``; during a turn it is ``⚕ ❯ `` with its hint
(``msg=interrupt · /queue · /bg · /steer · Ctrl+C cancel``), the submitted line shows above as
``● <text>`` and the turn's output above the block; while an approval waits its panel (``⚠️
Dangerous Command`` and its choices) sits above the block and the prompt is ``⚠ ❯ ``. Each
repaint erases the block (and the panel) and paints it again, so an old working prompt never
stays on screen. An interrupt shows ``⚡ Interrupting agent...``; a resume
``↻ Resumed session <ref>``; the end ``Shutting down… (finalizing session)``.

Input is taken as the session daemon types it (``chat_keys``): a bracketed paste is text, its
newlines included, and the ``\r`` after it submits it, so a pasted block of lines is one turn.
Each line is one turn, between an ``activity`` report of ``working`` and one of ``idle``:
any text is echoed; ``/sleep S`` is a long turn (0 < S <= 60); ``/spam N`` prints N numbered
lines (N <= 1,000,000); ``/bytes`` prints a line with invalid UTF-8; ``/approve`` paints an
approval panel, reports ``attention`` and waits for ``y`` or ``n``; ``/compact`` reports 1 or 2
new continuation ids; ``/tools`` lists the tools the enabled plugins registered and ``/tool
NAME {json}`` calls one as an agent turn would (one line ``tool-result NAME <json>``); an unknown
``/word`` is one error line. ``/fail`` exits 3 (as a crash
would: nothing released); ``/exit`` and end of input release the session (``session_end``).

Input is read as bytes, in the terminal's non-canonical mode with its own echo, and decoded
with replacement; a line over 64 KiB is refused. Ctrl-C (or SIGINT) ends a turn and does
nothing at the prompt; SIGWINCH repaints the prompt; SIGHUP, SIGTERM or a terminal gone
release the session (``agent_exit``) and end it, exit 0 (141 when stdout is a closed pipe).

Plugins (``hermes_cli.plugin_host``) load at start. The chat fires the Hermes hook points
(``on_session_start``, ``pre_llm_call`` and ``post_llm_call`` around each turn, the approval
pair, ``on_session_end`` and ``on_session_finalize``) with ids only; a plugin that takes one
makes its lifecycle report, else the chat makes it itself.

The chat is kept in ``<home>/chat_sessions/<ref>.json`` (``chat_sessions``), and its ref is
reported as the session's native id (``resumed`` when it was given back with ``--resume`` or
``-c``). An unknown or unreadable ref is one line on stderr, exit 1. With ``--pass-session-id``
the system prompt kept with the chat names the session's id, as the Hermes Agent's does.

This chat is the Hermes Agent's classic display (``--cli``); its alternate-screen TUI
(``--tui``) is not here: asked for it, the chat refuses in one line, exit 2, before it starts
(``--cli`` wins over ``--tui``, as it does there).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import select
import signal
import termios
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType

from hermes_cli import plugin_host
from hermes_cli.commands import chat_sessions
from hermes_cli.commands.chat_keys import END, SUBMIT, LineKeys
from hermes_cli.commands.chat_sessions import ChatSession
from hermes_cli.errors import CliError
from shared import exit_codes, homes, hooks
from shared.errors import HermesError

IDLE, WORKING, APPROVAL = "❯ ", "⚕ ❯ ", "⚠ ❯ "  # the prompts, as Hermes 0.20.0 paints them
WORKING_HINT = "msg=interrupt · /queue · /bg · /steer · Ctrl+C cancel"
MODEL = "scripted"  # in the status bar, where Hermes names its model
NEWLINE = b"\r\n"
DEFAULT_COLUMNS, MAX_COLUMNS = 80, 500
MAX_LINE_BYTES = 64 * 1024
MAX_SLEEP = 60.0
MAX_SPAM = 1_000_000
SPAM_CHUNK = 4096  # lines per write: a million lines in a few hundred writes
READ_BYTES = 64 * 1024
CTRL_C = 0x03
BAD_BYTES = b"bytes: ab\xff\xfecd"  # /bytes: invalid UTF-8 between ASCII
APPROVAL_COMMAND = "rm -rf ./build"
PANEL = (  # the approval panel of Hermes 0.20.0, with this chat's keys
    "╭────────────────────────────────────────────────╮",
    "│ ⚠️  Dangerous Command                          │",
    "│                                                │",
    f"│ {APPROVAL_COMMAND:<47}│",
    "│                                                │",
    "│ ❯ y. Allow once                                │",
    "│   n. Deny                                      │",
    "│                                                │",
    "│ recursive delete                               │",
    "╰────────────────────────────────────────────────╯",
    f"  💻 {APPROVAL_COMMAND}",
    "  y to allow once, n to deny",
)
INTERRUPTING = "⚡ Interrupting agent... (press Ctrl+C again to force exit)"
_COMMAND = re.compile(r"/[A-Za-z][A-Za-z0-9_-]*")
_COUNT = re.compile(r"[1-9][0-9]{0,6}")
_CONTROLS = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0)])  # C0, DEL and C1: never echoed to a screen


class ChatFlagsConflict(CliError):
    code = "chat_flags_conflict"


class ChatModeUnavailable(CliError):
    code = "chat_mode_unavailable"


# Not a HermesError: control flow inside the chat loop; the exit code it carries is not an error.
class _End(Exception):
    """The chat ends: ``reason`` is the release to report (None: none), ``code`` the exit code."""

    def __init__(self, reason: str | None, code: int) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code


# Not a HermesError: control flow inside the chat loop: the turn ends, the chat goes on.
class _Interrupted(Exception):
    """Ctrl-C or SIGINT during a turn: the turn ends."""


def cmd_chat(args) -> int:
    if getattr(args, "tui", False) and not getattr(args, "cli", False):
        raise ChatModeUnavailable(
            "hermes chat --tui: the alternate-screen TUI is not part of this install; "
            "run `hermes chat` (the classic display, as --cli)",
            detail={"field": "--tui"},
        )
    home = homes.active_home()
    session, resumed = _open(home, args)
    host = plugin_host.PluginHost.load(home)
    _Hooks(host, session).fire(
        "on_session_start", lambda: hooks.claim_native_id(session.ref, resumed=resumed), resumed=resumed
    )
    with _Signals() as signals, _Terminal(0, 1, signals) as terminal:
        return _Chat(terminal, signals, home, session, host).run(resumed)


def _open(home: Path, args) -> tuple[ChatSession, bool]:
    ref, again = getattr(args, "resume", None), getattr(args, "continue_session", False)
    if ref is not None and again:
        raise ChatFlagsConflict("--resume and -c/--continue name two chats: give one")
    toolsets, reasoning = getattr(args, "toolsets", None), getattr(args, "reasoning", None)
    pass_session_id = getattr(args, "pass_session_id", False)
    if ref is None and not again:
        session = chat_sessions.create(
            home, toolsets=list(toolsets) if toolsets else None, reasoning=reasoning, pass_session_id=pass_session_id
        )
        return session, False
    session = chat_sessions.load(home, ref) if ref is not None else chat_sessions.latest(home)
    session.toolsets = list(toolsets) if toolsets else session.toolsets
    session.reasoning = reasoning or session.reasoning
    session.pass_session_id = pass_session_id  # each run's own, as the flag is
    return session, True


class _Hooks:
    """The Hermes hook points of a chat. Each fires the enabled plugins' callbacks; the chat's
    own lifecycle report is the fallback for a hook point no plugin took, so a report is made
    once, by one of the two. No hook is ever given what the owner typed."""

    def __init__(self, host: plugin_host.PluginHost, session: ChatSession) -> None:
        self.host, self.session = host, session

    def fire(self, name: str, built_in: Callable[[], object] | None = None, **kwargs: object) -> None:
        if self.host.has_hook(name):
            # The chat goes on under its newest continuation id after a compaction.
            current = self.session.continuations[-1] if self.session.continuations else self.session.ref
            self.host.invoke_hook(name, session_id=current, platform="cli", **kwargs)
        elif built_in is not None:
            built_in()


class _Signals:
    """SIGINT, SIGTERM, SIGHUP and SIGWINCH, noted and woken on (``set_wakeup_fd``), so every
    wait sees them; the ones before are given back at the end. A stop that comes while a write
    to the terminal is blocked ends it at once (``stop_now``): nobody may be reading."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)

    def __init__(self) -> None:
        self.pending: set[int] = set()
        self.stop_now = False

    def __enter__(self) -> _Signals:
        self.fd, self._write_fd = os.pipe()
        for fd in (self.fd, self._write_fd):
            os.set_blocking(fd, False)
        self._previous = {sig: signal.signal(sig, self._note) for sig in self.HANDLED}
        self._previous_wakeup = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        os.close(self.fd)
        os.close(self._write_fd)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.pending.add(signum)
        if self.stop_now and signum in (signal.SIGTERM, signal.SIGHUP):
            raise _End("agent_exit", 0)

    def take(self, signum: int) -> bool:
        if signum in self.pending:
            self.pending.discard(signum)
            return True
        return False

    def drain(self) -> None:
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass


class _Terminal:
    """The chat's terminal: non-canonical, no echo, no signal keys and no output processing
    while the chat runs (it echoes, reads Ctrl-C and ends its lines itself), the mode before
    put back at the end; bytes read and not yet used wait in ``pending``."""

    def __init__(self, fd_in: int, fd_out: int, signals: _Signals) -> None:
        self.fd_in, self.fd_out, self.signals = fd_in, fd_out, signals
        self.pending = bytearray()
        self.eof = False  # end of input: the owner is done
        self.hangup = False  # the terminal went away
        self._saved: list | None = None

    def __enter__(self) -> _Terminal:
        if os.isatty(self.fd_in):
            self._saved = termios.tcgetattr(self.fd_in)
            mode = termios.tcgetattr(self.fd_in)
            mode[1] &= ~termios.OPOST  # what the chat writes reaches the screen as written (it writes \r\n)
            mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
            mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
            termios.tcsetattr(self.fd_in, termios.TCSANOW, mode)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._saved is not None:
            try:
                termios.tcsetattr(self.fd_in, termios.TCSANOW, self._saved)
            except (termios.error, OSError):
                pass  # the terminal is gone: there is no mode to put back

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        self.signals.stop_now = True
        try:
            while view:
                view = view[os.write(self.fd_out, view) :]
        except OSError as exc:
            raise _End("agent_exit", exit_codes.STDOUT_CLOSED if exc.errno == errno.EPIPE else 0) from None
        finally:
            self.signals.stop_now = False

    def wait(self, timeout: float | None) -> None:
        """Until input or a signal comes, at most ``timeout`` seconds (None: no bound, for the
        owner's next line)."""
        watched = [self.signals.fd] if self.eof or self.hangup else [self.signals.fd, self.fd_in]
        ready, _, _ = select.select(watched, [], [], timeout)
        if self.signals.fd in ready:
            self.signals.drain()
        if self.fd_in in ready:
            try:
                data = os.read(self.fd_in, READ_BYTES)
            except OSError:  # EIO: the other side of the PTY is closed
                self.hangup = True
                return
            self.eof = not data
            self.pending += data


class _Chat:
    def __init__(
        self, terminal: _Terminal, signals: _Signals, home: Path, session: ChatSession, host: plugin_host.PluginHost
    ) -> None:
        self.terminal, self.signals, self.home, self.session = terminal, signals, home, session
        self.host, self.hooks = host, _Hooks(host, session)
        self.turns = 0
        self.keys = LineKeys(MAX_LINE_BYTES)  # what the owner has typed of the next line
        self.prompt = IDLE
        self.up: int | None = None  # rows from the cursor up to the top of what the next paint erases
        self.column = 0  # the cursor's column on its row, as far as the echo moved it
        self.started = time.monotonic()
        self.panel: tuple[str, ...] = ()  # the approval panel while it waits

    def run(self, resumed: bool) -> int:
        try:
            verb = "resumed" if resumed else "started"
            banner = [f"hermes chat {self.session.ref} {verb} (scripted turns, no model)"]
            if resumed:
                banner.append(f"↻ Resumed session {self.session.ref} ({len(self.session.transcript)} transcript lines)")
            banner.append("Welcome to Hermes Agent! Type your message or /help for commands.")
            self._paint(IDLE, NEWLINE.join(line.encode() for line in banner) + NEWLINE)
            while True:
                line = self._read_line()
                if line is not None:
                    self._dispatch(line)
        except _End as end:
            return self._finish(end)

    def _finish(self, end: _End) -> int:
        self._save()
        if end.reason is not None:  # a crash (``/fail``) ends with no release, as a crash would
            reason = end.reason
            self.hooks.fire("on_session_end")
            self.hooks.fire("on_session_finalize", lambda: hooks.report_release(reason))
        try:
            self.terminal.write(self._erase() + NEWLINE.join(line.encode() for line in self._farewell(end)) + NEWLINE)
        except _End:
            pass
        return end.code

    def _farewell(self, end: _End) -> list[str]:
        if end.reason is None:
            return []
        if not self.session.transcript:
            return ["Shutting down… (finalizing session)", "Goodbye! ⚕"]
        ref = self.session.ref
        return [
            "Shutting down… (finalizing session)",
            "Resume this session with:",
            f"  hermes --resume {ref}",
            f"Session:        {ref}",
        ]

    # --- the screen -------------------------------------------------------------------------

    def _paint(self, prompt: str, printed: bytes = b"", above: tuple[str, ...] = ()) -> None:
        """Erase the prompt block (and what was painted above it), print ``printed`` (it stays),
        then the lines ``above`` (erased with the block next time) and the block with ``prompt``."""
        status = f" ⚕ {MODEL} │ ctx -- │ [░░░░░░░░░░] -- │ {int(time.monotonic() - self.started)}s"
        hint = WORKING_HINT if prompt == WORKING else ""
        block = [*above, status, "─" * _columns(self.terminal.fd_out)]
        out = self._erase() + printed + b"".join(line.encode() + NEWLINE for line in block) + (prompt + hint).encode()
        if hint:
            out += f"\x1b[{len(hint)}D".encode()  # the cursor after the prompt, on its hint
        self.prompt, self.up, self.column = prompt, len(block), len(prompt)
        self.terminal.write(out)

    def _erase(self) -> bytes:
        """Up to the top of the last paint's block, and clear to the end of the screen."""
        if self.up is None:
            return b""
        up, self.up = self.up, None
        return f"\r\x1b[{up}A\x1b[J".encode() if up else b"\r\x1b[J"

    def _echo(self, echo: bytes) -> None:
        """Show what the owner typed, counting the rows it takes, so the next paint erases them."""
        if not echo:
            return
        columns = _columns(self.terminal.fd_out)
        for byte in echo:
            if byte == 0x0A:
                self.up, self.column = (self.up or 0) + 1, 0
            elif byte == 0x08:
                self.column = max(0, self.column - 1)
            elif byte >= 0x20 and byte & 0xC0 != 0x80:  # a character starts (wide ones count one)
                self.column += 1
                if self.column > columns:
                    self.up, self.column = (self.up or 0) + 1, 1
        self.terminal.write(echo)

    def _save(self) -> None:
        try:
            chat_sessions.save(self.home, self.session)
        except (HermesError, OSError):
            pass  # a chat goes on without its file; the next save tries again

    # --- input ------------------------------------------------------------------------------

    def _check(self) -> None:
        """Act on what came since the last look: a stop or a hangup ends the chat, a resize
        repaints the prompt, an interrupt ends a turn (and does nothing at the prompt)."""
        if self.signals.take(signal.SIGTERM) | self.signals.take(signal.SIGHUP) or self.terminal.hangup:
            raise _End("agent_exit", 0)
        if self.signals.take(signal.SIGWINCH):
            self._paint(self.prompt, above=self.panel)
            if self.prompt == IDLE:
                self._echo(bytes(self.keys.line).replace(b"\n", NEWLINE))
        if self.signals.take(signal.SIGINT) and self.prompt != IDLE:
            raise _Interrupted

    def _read_line(self) -> str | None:
        """The owner's next line, echoed as it is typed; None for an empty or refused one."""
        while True:
            self._check()
            if not self.terminal.pending:
                if self.terminal.eof:
                    if self.keys.line and not self.keys.in_paste:  # the last line had no newline: still a line
                        return self._line_done()
                    raise _End("session_end", 0)  # a paste that never ended is not a turn
                self.terminal.wait(None)
                continue
            used, event = self.keys.feed(bytes(self.terminal.pending))
            del self.terminal.pending[:used]
            echo = bytes(self.keys.echo)
            self.keys.echo.clear()
            self._echo(echo)
            if event == END:
                raise _End("session_end", 0)
            if event == SUBMIT:
                return self._line_done()
            if self.terminal.pending:  # the start of an escape sequence: its rest is still coming
                if self.terminal.eof or self.terminal.hangup:
                    self.terminal.pending.clear()
                else:
                    self.terminal.wait(None)

    def _line_done(self) -> str | None:
        text, too_long = self.keys.done()
        if too_long:
            message = f"error: a line is at most {MAX_LINE_BYTES} bytes; that one was not run"
            self._paint(IDLE, message.encode() + NEWLINE)
            return None
        if not text.strip():
            self._paint(IDLE)
            return None
        return text

    # --- turns ------------------------------------------------------------------------------

    def _dispatch(self, text: str) -> None:
        word, _, rest = text.strip().partition(" ")
        rest = rest.strip()
        if word in ("/exit", "/fail"):
            self.session.note(f"> {word}")
            self._paint(IDLE, f"⚙️  {word}".encode() + NEWLINE)
            raise _End("session_end", 0) if word == "/exit" else _End(None, exit_codes.FAILED_TURN)
        self._paint(WORKING, _printed(["● " + line for line in text.split("\n")[:1]] + text.split("\n")[1:]))
        self.turns += 1
        self.hooks.fire("pre_llm_call", lambda: hooks.report_activity("working"), is_first_turn=self.turns == 1)
        self.session.note(f"> {text}")
        try:
            self._turn(word, rest, text)
        except _Interrupted:
            self._say(INTERRUPTING)
            self._say("interrupted")
        self.hooks.fire("post_llm_call", lambda: hooks.report_activity("idle"))
        self._save()  # before the idle prompt: a turn the screen shows done is on disk
        self._paint(IDLE)  # the working prompt is erased

    def _turn(self, word: str, rest: str, text: str) -> None:
        if not _COMMAND.fullmatch(word):
            self._say(text)
        elif word == "/sleep":
            self._sleep(rest)
        elif word == "/spam":
            self._spam(rest)
        elif word == "/tool":
            self._tool(rest)
        elif word in ("/bytes", "/approve", "/compact", "/tools") and rest:
            self._say(f"error: {word} takes no arguments")
        elif word == "/bytes":
            self._paint(WORKING, BAD_BYTES + NEWLINE)
            self.session.note(BAD_BYTES.decode("utf-8", errors="replace"))
        elif word == "/approve":
            self._approve()
        elif word == "/compact":
            ids = [chat_sessions.new_ref() for _ in range(1 + secrets.randbelow(2))]
            if not self.host.has_hook("pre_llm_call"):  # else a plugin reports it on the next turn
                hooks.report_continuation(ids)
            self.session.continue_as(ids)
            self._say(f"compacted: continues as {' '.join(ids)}")
        elif word == "/tools":
            self._say(f"tools: {' '.join(sorted(self.host.tools)) or '(none)'}")
        else:
            self._say(
                f"error: unknown command {word} (/sleep, /spam, /bytes, /approve, /compact, /tools, /tool, /fail, /exit)"
            )

    def _tool(self, rest: str) -> None:
        """``/tool NAME {json}``: the tool called as an agent turn calls it; its answer on one line."""
        name, _, raw = rest.partition(" ")
        if not name:
            self._say("error: usage: /tool NAME {json arguments}")
            return
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            self._say(f"tool-error invalid JSON at character {exc.pos}")
            return
        except RecursionError:  # the parser's own limit: a line of ``[[[[…``
            self._say("tool-error invalid JSON: nested too deeply")
            return
        self._say(f"tool-result {name} {self.host.dispatch(name, arguments)}")

    def _say(self, text: str) -> None:
        """The turn's output (a line, or one per line of a pasted text), above the working prompt."""
        lines = text.split("\n")
        self._paint(WORKING, _printed(lines))
        for line in lines:
            self.session.note(line.translate(_CONTROLS))

    def _sleep(self, rest: str) -> None:
        try:
            seconds = float(rest)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds <= MAX_SLEEP:  # NaN too
            self._say(f"error: usage: /sleep SECONDS (more than 0, at most {MAX_SLEEP:g})")
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.terminal.wait(left)
            self._check()
            self._interrupt_key()
        self._say(f"slept {seconds:g}s")

    def _interrupt_key(self) -> None:
        """End the turn on a Ctrl-C typed during it; other keys wait for the prompt."""
        at = self.terminal.pending.find(CTRL_C)
        if at >= 0:
            del self.terminal.pending[: at + 1]
            raise _Interrupted

    def _spam(self, rest: str) -> None:
        if not (_COUNT.fullmatch(rest) and int(rest) <= MAX_SPAM):
            self._say(f"error: usage: /spam N (1 to {MAX_SPAM:,})")
            return
        count = int(rest)
        for start in range(1, count + 1, SPAM_CHUNK):
            self.terminal.wait(0)
            self._check()
            self._interrupt_key()
            lines = "".join(f"line {i}\r\n" for i in range(start, min(start + SPAM_CHUNK, count + 1)))
            self._paint(WORKING, lines.encode())
        self.session.note(f"({count} lines)")

    def _approve(self) -> None:
        self.panel = PANEL
        self._paint(APPROVAL, above=PANEL)
        self.hooks.fire("pre_approval_request", lambda: hooks.report_attention("owner_approval"))
        try:
            allowed = self._answer()
        finally:
            self.panel = ()
            self._paint(WORKING)  # the panel goes with the block
        self.hooks.fire("post_approval_response", lambda: hooks.report_activity("working"), approved=allowed)
        self._say(f"⚠ Approval: {APPROVAL_COMMAND} → {'approved' if allowed else 'denied'}")

    def _answer(self) -> bool:
        while True:
            for i, byte in enumerate(self.terminal.pending):
                if byte in b"yYnN":
                    del self.terminal.pending[: i + 1]  # what follows the answer waits for the prompt
                    return byte in b"yY"
                if byte == CTRL_C:
                    del self.terminal.pending[: i + 1]
                    raise _Interrupted
            self.terminal.pending.clear()  # not an answer
            if self.terminal.eof:
                raise _End("session_end", 0)
            self.terminal.wait(None)
            self._check()


def _printed(lines: list[str]) -> bytes:
    """Lines of text to print, each without the control characters a screen would act on."""
    return b"".join(line.translate(_CONTROLS).encode() + NEWLINE for line in lines)


def _columns(fd: int) -> int:
    try:
        columns = os.get_terminal_size(fd).columns
    except OSError:  # not a terminal
        return DEFAULT_COLUMNS
    return min(max(columns, 1), MAX_COLUMNS) if columns else DEFAULT_COLUMNS
