"""``hermes chat`` on a real PTY: its prompts as the daemon's terminal shows them (the
simulator's screen) and as the Hermes detection rules read them, its input as the daemon types
it, its turns, its session file, and the hook reports it sends to a PULL socket standing where
the reporter's intake would be."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from shared.hook_reports import Report, parse_report
from simulators.operator_sim.detect import activity, load_rules
from simulators.operator_sim.screen import Screen
from tests.support.cli import HERMES
from tests.support.processes import ROOT, python_env

pytestmark = pytest.mark.slow

WAIT = 30.0  # seconds any one thing may take to show on a loaded machine
SESSION = "s-1"
IDLE, WORKING = "❯", "⚕ ❯"
RULES = load_rules((ROOT / "runtime-packages" / "hermes" / "detect.toml").read_text(encoding="utf-8"))
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
SUBMIT_DELAY = 0.15  # the daemon's pause between a Hermes paste and its submit
REF = re.compile(r"hermes chat ([0-9]{8}_[0-9]{6}_[0-9a-f]{6}) (started|resumed)")


class Chat:
    """``hermes ARGS`` on the slave of a new PTY, in its own session; the test reads the master."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None, rows: int = 24, cols: int = 100):
        self.master, slave = os.openpty()
        self.resize(rows, cols)
        self.proc = subprocess.Popen(
            [*HERMES, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=ROOT,
            env=_environment(home, env or {}),
            start_new_session=True,
        )
        os.close(slave)
        os.set_blocking(self.master, False)
        self.output = bytearray()
        self.size = (cols, rows)
        self.screen = Screen(cols, rows)
        self.closed = False

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _read(self, timeout: float) -> None:
        if self.closed or not select.select([self.master], [], [], timeout)[0]:
            return
        try:
            data = os.read(self.master, 1 << 16)
        except BlockingIOError:
            return
        except OSError:  # EIO: every slave is closed, the chat is gone
            data = b""
        if not data:
            self.closed = True
            return
        self.output += data
        self.screen.feed(data)

    def until(self, ready: Callable[[], object], what: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n" + "\n".join(self.lines()))
            self._read(0.05)

    def send(self, data: bytes) -> None:
        """Write ``data`` to the chat's input, reading its echo meanwhile (a PTY's buffers are small)."""
        view = memoryview(data)
        deadline = time.monotonic() + WAIT
        while view:
            assert time.monotonic() < deadline, "the chat stopped reading its input"
            try:
                view = view[os.write(self.master, view) :]
            except BlockingIOError:
                pass
            self._read(0.01)

    def lines(self) -> list[str]:
        return [line for line in self.screen.visible_lines() if line.strip()]

    def activity(self) -> str | None:
        """The screen as the daemon's Hermes rules read it."""
        return activity(RULES, self.screen.visible_lines())

    def paste(self, text: str) -> None:
        """``text`` typed as the daemon types into Hermes: one bracketed paste, a pause, ``\\r``."""
        self.send(PASTE_START + text.encode() + PASTE_END)
        time.sleep(SUBMIT_DELAY)
        self.send(b"\r")

    def bottom(self) -> str:
        found = self.lines()
        return found[-1] if found else ""

    def at_idle_prompt(self) -> bool:
        return self.bottom().startswith(IDLE) and not any(WORKING in line for line in self.lines()[-8:])

    def line(self, text: str) -> None:
        """Type ``text`` and Enter, as the daemon's input does (submit is ``\\r``)."""
        self.send(text.encode() + b"\r")

    def turn(self, text: str, shows: str) -> None:
        """A whole turn: ``text`` typed, ``shows`` printed, the idle prompt back."""
        self.line(text)
        self.until(lambda: shows in self.lines() and self.at_idle_prompt(), f"{text!r} to answer {shows!r}")

    def approve(self) -> None:
        """A whole ``/approve`` turn: the panel painted, allowed with ``y``, the idle prompt back."""
        self.line("/approve")
        self.until(lambda: any("Dangerous Command" in line for line in self.lines()), "the panel")
        self.send(b"y")
        self.until(lambda: "⚠ Approval: rm -rf ./build → approved" in self.lines() and self.at_idle_prompt(), "the end")

    def ref(self) -> str:
        self.until(lambda: REF.search(self.output.decode(errors="replace")), "the banner")
        found = REF.search(self.output.decode(errors="replace"))
        assert found
        return found.group(1)

    def wait(self) -> int:
        self.until(lambda: self.proc.poll() is not None, "the chat to exit")
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(WAIT)
        os.close(self.master)


def _environment(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in python_env().items() if not k.startswith("POHUNEK_")}  # managed only when asked
    return {**env, "HERMES_HOME": str(home), **extra}


class Reports:
    """The hook reports the chat sends, parsed with the reporter's own check."""

    def __init__(self, pull: zmq.Socket) -> None:
        self.pull = pull
        self.got: list[Report] = []

    def next(self, kind: str) -> Report:
        """The next report, which must be of ``kind``."""
        assert self.pull.poll(int(WAIT * 1000)), f"no {kind} report arrived (got {[r.kind for r in self.got]})"
        report = parse_report(self.pull.recv())
        self.got.append(report)
        assert report.kind == kind, (report.kind, report.fields)
        return report

    def activity(self, *states: str) -> None:
        for state in states:
            assert self.next("activity").fields == {"state": state}

    def none_left(self) -> bool:
        return not self.pull.poll(200)


@pytest.fixture
def home(short_dir) -> Path:
    path = short_dir / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def managed(short_dir, bind_pull) -> tuple[dict[str, str], Reports]:
    address = f"ipc://{short_dir}/in"
    reports = Reports(bind_pull(address))
    return {"POHUNEK_HOOK_ENDPOINT": address, "POHUNEK_SESSION_ID": SESSION}, reports


@pytest.fixture
def chats():
    started: list[Chat] = []

    def start(*args, **options) -> Chat:
        started.append(Chat(*args, **options))
        return started[-1]

    yield start
    for chat in started:
        chat.close()


def record(home: Path, ref: str) -> dict:
    return json.loads((home / "chat_sessions" / f"{ref}.json").read_text())


# --- the turns -------------------------------------------------------------------------------


def test_a_managed_chat_reports_its_id_and_each_turn(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    native = reports.next("native_id")
    assert native.fields == {"native_id": ref, "resumed": False}
    assert native.session == SESSION and native.pid == chat.proc.pid

    chat.turn("hello", "hello")
    assert chat.bottom() == IDLE
    reports.activity("working", "idle")

    chat.line("/exit")
    assert chat.wait() == 0
    assert reports.next("release").fields == {"reason": "session_end"}
    assert reports.none_left()

    folder = home / "chat_sessions"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert oct((folder / f"{ref}.json").stat().st_mode & 0o777) == "0o600"
    saved = record(home, ref)
    assert saved["ref"] == ref and saved["transcript"] == ["> hello", "hello", "> /exit"]
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_the_working_prompt_shows_during_a_long_turn_and_is_erased_after(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.line("/sleep 2")
    chat.until(lambda: chat.bottom().startswith(WORKING), "the working prompt")
    reports.next("native_id")
    reports.activity("working")
    chat.until(lambda: "slept 2s" in chat.lines() and chat.at_idle_prompt(), "the turn to end")
    assert not any(WORKING in line for line in chat.lines())  # erased, not scrolled up
    reports.activity("idle")


def test_interrupting_a_turn_with_ctrl_c_or_sigint_ends_it_and_at_the_prompt_does_nothing(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    for interrupt in (lambda: chat.send(b"\x03"), lambda: os.kill(chat.proc.pid, signal.SIGINT)):
        chat.line("/sleep 60")
        chat.until(lambda: chat.bottom().startswith(WORKING), "the working prompt")
        reports.activity("working")
        interrupt()
        chat.until(lambda: chat.lines().count("interrupted") == 1 and chat.at_idle_prompt(), "the interrupt")
        reports.activity("idle")
        assert "⚡ Interrupting agent... (press Ctrl+C again to force exit)" in chat.lines()
        chat.screen = Screen(*chat.size)  # the next round counts its own "interrupted"
    chat.send(b"\x03")
    os.kill(chat.proc.pid, signal.SIGINT)
    chat.turn("still here", "still here")
    assert chat.proc.poll() is None


def test_spam_prints_every_numbered_line(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/spam 1000", "line 1000")
    text = chat.output.decode()
    assert [int(n) for n in re.findall(r"line ([0-9]+)\r\n", text)] == list(range(1, 1001))


def test_bytes_prints_invalid_utf8_as_bytes(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/bytes", "bytes: ab\ufffd\ufffdcd")
    assert b"bytes: ab\xff\xfecd\r\n" in chat.output


def test_approve_paints_the_panel_reports_attention_and_erases_it(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    for answer, outcome in (
        (b"y", "⚠ Approval: rm -rf ./build → approved"),
        (b"n\r", "⚠ Approval: rm -rf ./build → denied"),
    ):
        chat.line("/approve")
        chat.until(lambda: any("Dangerous Command" in line for line in chat.lines()), "the panel")
        panel = "\n".join(chat.lines())
        assert "⚠️  Dangerous Command" in panel and "Allow once" in panel and "Deny" in panel
        assert chat.bottom() == "⚠ ❯" and chat.activity() == "blocked"
        reports.activity("working")
        assert reports.next("attention").fields == {"reason": "owner_approval"}
        chat.send(b"x")  # not an answer: still waiting
        chat.send(answer)
        chat.until(lambda outcome=outcome: outcome in chat.lines() and chat.at_idle_prompt(), outcome)
        assert not any("Dangerous Command" in line or "Allow once" in line for line in chat.lines())
        reports.activity("working", "idle")


def test_compact_reports_new_continuation_ids(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.line("/compact")
    chat.until(lambda: any(line.startswith("compacted:") for line in chat.lines()), "the compaction")
    reports.activity("working")
    ids = reports.next("continuation").fields["continuation_ids"]
    assert 1 <= len(ids) <= 2 and ref not in ids and len(set(ids)) == len(ids)
    reports.activity("idle")
    chat.until(lambda: record(home, ref)["continuations"] == ids, "the continuations in the file")


def test_an_unknown_command_is_one_error_line_and_other_text_is_echoed(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.line("/frobnicate")
    chat.until(lambda: any(line.startswith("error: unknown command /frobnicate") for line in chat.lines()), "error")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/usr/bin is a path", "/usr/bin is a path")
    chat.turn("/sleep soon", "error: usage: /sleep SECONDS (more than 0, at most 60)")
    chat.turn("/sleep 61", "error: usage: /sleep SECONDS (more than 0, at most 60)")
    chat.turn("/spam 1000001", "error: usage: /spam N (1 to 1,000,000)")
    assert chat.proc.poll() is None  # errors are lines, not exits


def test_fail_exits_3_without_a_release(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.line("/fail")
    assert chat.wait() == 3
    assert reports.none_left()


def test_end_of_input_releases_the_session(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.send(b"\x04")  # Ctrl-D on an empty line
    assert chat.wait() == 0
    reports.next("native_id")
    assert reports.next("release").fields == {"reason": "session_end"}


def test_input_from_a_pipe_ends_at_its_end(home):
    done = subprocess.run(
        [*HERMES, "chat"],
        input=b"hello\n/bytes\nlast line without a newline",
        capture_output=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home)),
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    assert b"hello\r\n" in done.stdout and b"\xff\xfe" in done.stdout
    assert b"last line without a newline\r\n" in done.stdout.split(b"hello", 1)[1]


# --- input that is not a plain line ----------------------------------------------------------


def test_non_utf8_input_is_read_with_replacement(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.send(b"caf\xc3\xa9 \xff\xfe ok\r")
    chat.until(lambda: "café \ufffd\ufffd ok" in chat.lines() and chat.at_idle_prompt(), "the echo")
    chat.turn("after", "after")
    assert "café \ufffd\ufffd ok" in chat.lines() and chat.proc.poll() is None


def test_a_line_over_64_kib_is_refused_and_the_chat_goes_on(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.send(b"x" * (64 * 1024 + 1) + b"\r")
    chat.until(lambda: any("at most 65536 bytes" in line for line in chat.lines()), "the refusal")
    chat.send(b"y" * (64 * 1024) + b"\r")  # exactly the bound is a line
    chat.until(lambda: chat.output.count(b"y" * 1000) >= 2 and chat.at_idle_prompt(), "the long echo")
    reports.activity("working", "idle")  # the refused line was no turn
    chat.turn("/sleep 0.1", "slept 0.1s")
    assert chat.output.count(b"at most 65536 bytes") == 1  # one refusal, and the bound itself passed


def test_a_paste_as_the_daemon_types_it_is_one_turn_newlines_and_all(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.paste("Treat all three lines as one prompt.\nalpha\nbeta")
    chat.until(lambda: "beta" in chat.lines()[-4:] and chat.at_idle_prompt(), "the turn")
    reports.activity("working", "idle")  # one turn
    assert "● Treat all three lines as one prompt." in chat.lines()
    chat.paste("/sleep 0.1")  # a command pasted is a command
    chat.until(lambda: "slept 0.1s" in chat.lines() and chat.at_idle_prompt(), "the command")
    reports.activity("working", "idle")
    chat.line("/exit")
    assert chat.wait() == 0
    transcript = record(home, ref)["transcript"]
    assert transcript[:4] == [
        "> Treat all three lines as one prompt.\nalpha\nbeta",
        *"Treat all three lines as one prompt.|alpha|beta".split("|"),
    ]


@pytest.mark.parametrize(
    ("odd", "submitted"),
    [
        (b"\x1b", None),  # a lone ESC
        (b"\x1b[20", None),  # a paste start cut short
        (b"\x1b[20x", None),  # ... then something else
        (b"\x1b[201~", None),  # an end with no start
        (b"\x1b[A\x1bOB\x1b[1;5C", None),  # arrow keys
        (b"\x1b[" + b"9" * 5000, None),  # parameters without end, over several reads
        (PASTE_START + b"never ended\r\x04\x03", None),  # a paste with no end, left with Ctrl-C
        (PASTE_START + PASTE_START + b"nested" + PASTE_END + PASTE_END + b"\x1b[200~\x1b[201~", "nested"),
    ],
)
def test_odd_escape_sequences_run_no_stray_turn_and_the_chat_goes_on(home, managed, chats, odd, submitted):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.send(odd)
    chat.send(b"\r")  # submits what the odd bytes left of the line
    chat.paste("after")
    chat.until(lambda: "after" in chat.lines() and chat.at_idle_prompt(), "the next turn")
    reports.activity(*["working", "idle"] * (1 if submitted is None else 2))
    assert reports.none_left() and chat.proc.poll() is None
    chat.line("/exit")
    assert chat.wait() == 0
    typed = [line for line in record(home, ref)["transcript"] if line.startswith("> ")]
    assert typed == [*([] if submitted is None else [f"> {submitted}"]), "> after", "> /exit"]


def test_a_paste_past_the_bound_is_refused_whole(home, managed, chats):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    chat.paste("x" * (70 * 1024))
    chat.until(lambda: any("at most 65536 bytes" in line for line in chat.lines()), "the refusal")
    chat.turn("ok", "ok")
    reports.activity("working", "idle")  # the refused paste was no turn
    assert [line for line in record(home, ref)["transcript"] if line.startswith("> ")] == ["> ok"]


def test_a_paste_that_never_ends_is_no_turn_at_the_end_of_input(home):
    done = subprocess.run(
        [*HERMES, "chat"],
        input=PASTE_START + b"half a paste\r",
        capture_output=True,
        cwd=ROOT,
        env=_environment(home, {}),
        timeout=WAIT,
    )
    assert done.returncode == 0
    [saved] = (home / "chat_sessions").glob("*.json")
    assert json.loads(saved.read_text())["transcript"] == []


def test_the_rules_read_the_chats_screen_as_the_real_hermes(home, chats):
    chat = chats(home, "chat", rows=32, cols=100)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    assert chat.activity() == "idle" and chat.bottom() == IDLE
    status, rule = chat.lines()[-3:-1]
    assert status.startswith(" ⚕ scripted │ ctx -- │ [░░░░░░░░░░] -- │ ") and rule == "─" * 100
    chat.paste("/sleep 60")
    chat.until(lambda: chat.bottom().startswith(WORKING), "the working prompt")
    assert chat.bottom() == "⚕ ❯ msg=interrupt · /queue · /bg · /steer · Ctrl+C cancel"
    assert chat.activity() == "working"
    chat.send(b"\x03")
    chat.until(chat.at_idle_prompt, "the interrupt")
    assert chat.activity() == "idle"
    chat.line("/approve")
    chat.until(lambda: chat.bottom() == "⚠ ❯", "the approval prompt")
    assert chat.activity() == "blocked"
    chat.send(b"n")
    chat.until(chat.at_idle_prompt, "the denial")
    assert chat.activity() == "idle"
    chat.line("/exit")
    assert chat.wait() == 0
    assert chat.lines()[-4:] == [
        "Shutting down… (finalizing session)",
        "Resume this session with:",
        f"  hermes --resume {chat.ref()}",
        f"Session:        {chat.ref()}",
    ]
    assert chat.activity() is None


def test_backspace_edits_the_line(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.send("helxé".encode() + b"\x7f\x7flo\r")  # é is two bytes, one character
    chat.until(lambda: "hello" in chat.lines() and chat.at_idle_prompt(), "the edited line")
    assert not any("helx" in line for line in chat.lines()[-2:-1])  # the answer is the edited line


# --- signals ---------------------------------------------------------------------------------


def test_sigwinch_repaints_the_prompt_with_the_line_typed_so_far(home, chats):
    chat = chats(home, "chat")
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.send(b"half a li")
    chat.until(lambda: chat.bottom() == f"{IDLE} half a li", "the echo")
    before = len(chat.output)
    chat.resize(30, 60)
    os.kill(chat.proc.pid, signal.SIGWINCH)  # the PTY is not the chat's controlling terminal here
    repaint = ("─" * 60 + "\r\n❯ half a li").encode()  # the block at the new width, the line kept
    chat.until(lambda: repaint in chat.output[before:], "the repaint")
    chat.send(b"ne\r")
    chat.until(lambda: "half a line" in chat.lines() and chat.at_idle_prompt(), "the line")
    # One turn of the whole line: the repaint neither lost what was typed nor submitted it early.
    assert [line for line in record(home, ref)["transcript"] if line.startswith("> ")] == ["> half a line"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("during", ["prompt", "turn"])
def test_sigterm_and_sighup_end_it_cleanly_with_a_release(home, managed, chats, signum, during):
    env, reports = managed
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    reports.next("native_id")
    if during == "turn":
        chat.line("/sleep 60")
        chat.until(lambda: chat.bottom().startswith(WORKING), "the working prompt")
        reports.activity("working")
    os.kill(chat.proc.pid, signum)
    assert chat.wait() == 0
    assert reports.next("release").fields == {"reason": "agent_exit"}
    assert record(home, ref)["ref"] == ref


# --- resume ----------------------------------------------------------------------------------


def test_resume_reports_the_same_ref_resumed_and_keeps_the_transcript(home, managed, chats):
    env, reports = managed
    first = chats(home, "chat", env=env)
    ref = first.ref()
    first.until(first.at_idle_prompt, "the idle prompt")
    first.turn("remember me", "remember me")
    first.line("/exit")
    assert first.wait() == 0
    assert reports.next("native_id").fields == {"native_id": ref, "resumed": False}
    reports.activity("working", "idle")
    reports.next("release")

    for argv in (["chat", "--resume", ref], ["--resume", ref], ["-c"], ["-p", "default", "chat", "-c"]):
        again = chats(home, *argv, env=env)
        assert again.ref() == ref and f"hermes chat {ref} resumed" in again.output.decode()
        again.until(again.at_idle_prompt, "the idle prompt")
        assert reports.next("native_id").fields == {"native_id": ref, "resumed": True}
        again.send(b"\x04")
        assert again.wait() == 0
        reports.next("release")
    assert record(home, ref)["transcript"][:3] == ["> remember me", "remember me", "> /exit"]
    assert len(list((home / "chat_sessions").glob("*.json"))) == 1


@pytest.mark.parametrize(
    "ref",
    ["20261201_185301_ab12cd", "../../etc/passwd", "20261201_185301_AB12CD", "x" * 200, "", "--"],
)
def test_an_unknown_or_invalid_ref_is_one_line_and_exit_1(home, managed, ref):
    env, reports = managed
    done = subprocess.run(
        [*HERMES, "chat", f"--resume={ref}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home), **env),
        stdin=subprocess.DEVNULL,
        timeout=WAIT,
    )
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("hermes: ")
    assert done.stdout == ""
    assert reports.none_left()


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"v": 1, "ref": "20261201_185301_000000"}', b"\xff"])
def test_an_unreadable_session_file_is_one_line_and_exit_1(home, content):
    ref = "20261201_185301_ab12cd"
    folder = home / "chat_sessions"
    folder.mkdir(mode=0o700)
    (folder / f"{ref}.json").write_bytes(content)
    done = subprocess.run(
        [*HERMES, "chat", "--resume", ref],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home)),
        stdin=subprocess.DEVNULL,
        timeout=WAIT,
    )
    assert (done.returncode, len(done.stderr.splitlines())) == (1, 1), done.stderr
    assert (folder / f"{ref}.json").read_bytes() == content  # left as it was


def test_continue_with_no_chat_and_both_flags_are_refused(home):
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*HERMES, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=python_env(HERMES_HOME=str(home)),
            stdin=subprocess.DEVNULL,
            timeout=WAIT,
        )

    nothing = run("-c")
    assert nothing.returncode == 1 and "no chat session to continue" in nothing.stderr
    both = run("-c", "chat", "--resume", "20261201_185301_ab12cd")
    assert both.returncode == 2 and len(both.stderr.splitlines()) == 1
    bad = run("--reasoning", "extreme", "chat")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_pass_session_id_names_the_session_in_the_system_prompt_kept_with_it(home, chats):
    chat = chats(home, "chat", "--pass-session-id")
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    assert f"Session ID: {ref}" in record(home, ref)["system_prompt"].splitlines()
    chat.line("/compact")
    chat.until(lambda: any(line.startswith("compacted:") for line in chat.lines()), "the compaction")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    newest = record(home, ref)["continuations"][-1]
    assert f"Session ID: {newest}" in record(home, ref)["system_prompt"].splitlines()
    chat.line("/exit")
    assert chat.wait() == 0

    for argv in (["chat"], ["chat", "--resume", ref]):  # the flag is each run's own
        plain = chats(home, *argv)
        shown = plain.ref()
        plain.until(plain.at_idle_prompt, "the idle prompt")
        plain.line("/exit")
        assert plain.wait() == 0
        assert "Session ID" not in record(home, shown)["system_prompt"]


def test_tui_is_refused_in_one_line_before_the_chat_starts_and_cli_is_this_chat(home, chats):
    for argv in (["chat", "--tui"], ["--tui", "chat"], ["chat", "--tui", "--resume", "20261201_185301_ab12cd"]):
        done = subprocess.run(
            [*HERMES, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=python_env(HERMES_HOME=str(home)),
            stdin=subprocess.DEVNULL,
            timeout=WAIT,
        )
        assert (done.returncode, done.stdout) == (2, ""), done
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "--tui" in done.stderr and "hermes chat" in done.stderr
    assert not (home / "chat_sessions").exists()  # refused before any chat was made

    for argv in (["chat", "--cli"], ["chat", "--tui", "--cli"]):  # --cli wins, as in the Hermes Agent
        chat = chats(home, *argv)
        chat.ref()
        chat.until(chat.at_idle_prompt, "the idle prompt")
        chat.line("/exit")
        assert chat.wait() == 0


# --- unmanaged -------------------------------------------------------------------------------


def test_unmanaged_it_works_and_reports_nothing(home, short_dir, bind_pull, chats):
    address = f"ipc://{short_dir}/in"
    reports = Reports(bind_pull(address))
    chat = chats(home, "chat", env={"POHUNEK_HOOK_ENDPOINT": address})  # no session id
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("hello", "hello")
    chat.approve()
    chat.line("/exit")
    assert chat.wait() == 0
    assert reports.none_left()


# --- plugins: tools and hook points ----------------------------------------------------------

PLUGIN = """
import json

SCHEMA = {"name": "echo", "description": "echo", "parameters": {"type": "object", "properties": {}}}


def register(ctx):
    ctx.register_tool("echo", "demo", SCHEMA, lambda args, **kw: json.dumps({"ok": True, "result": args}))
    big = {**SCHEMA, "name": "big"}
    ctx.register_tool("big", "demo", big, lambda args, **kw: json.dumps({"ok": True, "result": "é" * args["n"]}))
"""

HOOK_PLUGIN = """
import json

NAMES = ("on_session_start", "pre_llm_call", "post_llm_call", "pre_approval_request",
         "post_approval_response", "on_session_end", "on_session_finalize")


def _note(name):
    def hook(**kwargs):
        with open(__file__ + ".log", "a") as log:
            log.write(json.dumps([name, sorted(kwargs), kwargs.get("session_id")]) + "\\n")
    return hook


def register(ctx):
    for name in NAMES:
        ctx.register_hook(name, _note(name))
"""


def add_plugin(home: Path, name: str, body: str) -> Path:
    from hermes_cli import plugin_host

    directory = home / "plugins" / name
    directory.mkdir(parents=True)
    (directory / "plugin.yaml").write_text(f"name: {name}\nversion: 1.0\n")
    (directory / "__init__.py").write_text(body)
    plugin_host.set_enabled(home, name, True)
    return directory


def tool_result(chat: Chat, name: str) -> dict:
    pattern = re.compile(rf"tool-result {name} (\{{.*?\}})\r\n".encode())
    chat.until(lambda: pattern.search(bytes(chat.output)), f"the answer of {name}")
    found = pattern.search(bytes(chat.output))
    assert found
    return json.loads(found.group(1))


def test_tools_lists_nothing_without_plugins_and_a_tool_line_answers_tool_not_found(home, chats):
    chat = chats(home, "chat")
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/tools", "tools: (none)")
    chat.line('/tool echo {"a": 1}')
    assert tool_result(chat, "echo")["error"]["code"] == "tool_not_found"


def test_a_plugins_tool_is_called_as_a_turn_calls_it(home, chats):
    add_plugin(home, "demo", PLUGIN)
    chat = chats(home, "chat", cols=200)
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/tools", "tools: big echo")
    chat.line("/tool echo " + json.dumps({"a": [1, 2], "text": "é ❯"}))
    assert tool_result(chat, "echo") == {"ok": True, "result": {"a": [1, 2], "text": "é ❯"}}
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.line('/tool big {"n": 100000}')  # a long answer still comes out as one line
    assert tool_result(chat, "big") == {"ok": True, "result": "é" * 100_000}
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("/tool echo {not json", "tool-error invalid JSON at character 1")
    chat.turn("/tool echo " + "[" * 60_000, "tool-error invalid JSON: nested too deeply")
    chat.turn("/tool", "error: usage: /tool NAME {json arguments}")


def test_the_hook_points_fire_in_order_with_ids_only_and_the_plugin_reports_instead(home, managed, chats):
    env, reports = managed
    log = add_plugin(home, "hooks", HOOK_PLUGIN) / "__init__.py.log"
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    chat.turn("a secret prompt", "a secret prompt")
    chat.approve()
    chat.line("/exit")
    assert chat.wait() == 0
    fired = [json.loads(line) for line in log.read_text().splitlines()]
    assert [name for name, _, _ in fired] == [
        "on_session_start",
        "pre_llm_call",
        "post_llm_call",
        "pre_llm_call",
        "pre_approval_request",
        "post_approval_response",
        "post_llm_call",
        "on_session_end",
        "on_session_finalize",
    ]
    assert {session for _, _, session in fired} == {ref}
    assert "secret" not in log.read_text()
    # The plugin took every hook point, so the chat made none of its own reports.
    assert reports.none_left()


def test_hook_points_no_plugin_took_are_still_reported_by_the_chat(home, managed, chats):
    env, reports = managed
    add_plugin(
        home, "turns", HOOK_PLUGIN.replace("for name in NAMES:", 'for name in ("pre_llm_call", "post_llm_call"):')
    )
    chat = chats(home, "chat", env=env)
    ref = chat.ref()
    chat.until(chat.at_idle_prompt, "the idle prompt")
    assert reports.next("native_id").fields == {"native_id": ref, "resumed": False}
    chat.turn("hello", "hello")  # the plugin took the turn's hook points: no activity report from the chat
    chat.line("/exit")
    assert chat.wait() == 0
    assert reports.next("release").fields == {"reason": "session_end"}
    assert reports.none_left()
