"""The detection rules read the real Hermes 0.20.0: each of its ten PTY transcripts, rendered on
the harness's screen, is classified as the daemon's activity at that moment.

A transcript is linearised (control sequences stripped, one repaint after another), so a moment
of it is its text up to the end of one repaint: a prompt line (``❯`` alone or after one glyph,
maybe with text after it) and the rule under it. Replayed line by line through the simulator's
screen at the harness's size, the last screenful is what the rules see, as the daemon's would.
The daemon knows three activities (working, blocked, idle); a Hermes that has exited shows none.
The daemon's own manifest (``hermes-detect-manifest.toml``, unchanged) is read by the same
engine to show where it misreads the real screens.
"""

from __future__ import annotations

import re

import pytest

from simulators.operator_sim.detect import activity, load_rules
from simulators.operator_sim.screen import Screen
from tests.support import hermes_contract
from tests.support.processes import ROOT

COLS, ROWS = 100, 32
OURS = load_rules((ROOT / "runtime-packages" / "hermes" / "detect.toml").read_text(encoding="utf-8"))
_UPSTREAM = (hermes_contract.DIR / "hermes-detect-manifest.toml").read_text(encoding="utf-8")
UPSTREAM = load_rules(_UPSTREAM[_UPSTREAM.index("[[rules]]") :])  # less its process scan, which is not ours

_PROMPT = re.compile(r"^(?:[^\s│]+\s+)?❯(?:\s|$)")
_RULE = re.compile(r"^─+$")
EXIT = "⚙️  /exit"  # the harness's last input: everything after it is Hermes shutting down
LAST = "<the last prompt before the owner's /exit>"
WHOLE = "<the whole transcript: Hermes has exited>"

# Each moment: the golden, where it is (the first prompt at or after the first line holding this
# text, or LAST, or WHOLE), the golden header's state, and the daemon's activity there.
MOMENTS = [
    ("prompt-ready", "Welcome to Hermes Agent!", "idle"),
    ("short-input", "Window too small", "working"),  # submitted: the turn runs
    ("short-input", LAST, "idle"),  # answered
    ("multiline-input", "● Treat all three lines as one prompt.", "working"),  # one turn for the three lines
    ("multiline-input", LAST, "idle"),
    ("working", "💻 sleep 8  (", "working"),
    ("approval-blocked", "Dangerous Command", "blocked"),
    ("completion", "HERMES_COMPAT_OK\n", "working"),  # the answer is painted while the turn ends
    ("completion", LAST, "idle"),
    ("interruption", "Interrupting agent", "working"),  # the turn is still being stopped
    ("interruption", LAST, "idle"),
    ("exit", LAST, "idle"),
    ("exit", WHOLE, None),
    ("resume", "Resumed session", "idle"),
    ("alternate-screen-tui", WHOLE, None),  # unsupported: Node.js missing, nothing to read
]
# Where the daemon's own manifest misreads the real screens (what it answers instead).
UPSTREAM_MISREADS = {
    ("short-input", "Window too small"): None,
    ("multiline-input", "● Treat all three lines as one prompt."): None,
    ("working", "💻 sleep 8  ("): None,
    ("approval-blocked", "Dangerous Command"): None,
    ("completion", "HERMES_COMPAT_OK\n"): None,
    ("interruption", "Interrupting agent"): None,
}
GOLDENS = {golden.id: golden for golden in hermes_contract.goldens()}


def moment(transcript: str, where: str) -> list[str]:
    lines = transcript.splitlines()
    if where == WHOLE:
        return lines
    if where == LAST:
        prompt = max(i for i in range(lines.index(EXIT)) if _PROMPT.match(lines[i]))
    else:
        first = transcript.index(where)
        start = transcript.count("\n", 0, first)
        prompt = next(i for i in range(start, len(lines)) if _PROMPT.match(lines[i]))
    end = prompt + 1
    while end < len(lines) and (not lines[end].strip() or _RULE.match(lines[end])):
        end += 1  # the rule under the prompt
    return lines[:end]


def rendered(lines: list[str]) -> list[str]:
    screen = Screen(COLS, ROWS)
    screen.feed("\r\n".join(lines).encode())
    return screen.visible_lines()


def test_every_golden_has_a_moment():
    assert {golden for golden, _, _ in MOMENTS} == set(GOLDENS)


@pytest.mark.parametrize(("golden", "where", "expected"), MOMENTS)
def test_the_rules_read_each_real_screen_as_the_daemon_state(golden, where, expected):
    assert activity(OURS, rendered(moment(GOLDENS[golden].transcript, where))) == expected


def test_the_daemons_own_manifest_misreads_the_working_and_approval_screens():
    misread = {}
    for golden, where, expected in MOMENTS:
        seen = activity(UPSTREAM, rendered(moment(GOLDENS[golden].transcript, where)))
        if seen != expected:
            misread[(golden, where)] = seen
    assert misread == UPSTREAM_MISREADS
