"""A hermes session's activity off its screen, by ``runtime-packages/hermes/detect.toml``."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulators.operator_sim.detect import DetectRulesInvalid, activity, choose_activity, load_rules

RULES_FILE = Path(__file__).resolve().parents[2] / "runtime-packages" / "hermes" / "detect.toml"
HERMES = load_rules(RULES_FILE.read_text(encoding="utf-8"))
BLANK = " " * 40  # a pyte line is padded to the screen's width

APPROVAL_PANEL = [
    "╭─ Dangerous Command ─────────────────╮",
    "│ rm -rf build/                       │",
    "│ ❯ Allow once                        │",
    "│   Allow always                      │",
    "│   Deny                              │",
    "╰─────────────────────────────────────╯",
]


def screen(*lines: str, rows: int = 24) -> list[str]:
    padded = [line.ljust(40) for line in lines]
    return padded + [BLANK] * (rows - len(padded))


def test_the_file_holds_the_hermes_rules_in_order():
    assert [rule.id for rule in HERMES] == [
        "fatal_startup",
        "dangerous_command_approval",
        "tui_approval",
        "approval_prompt",
        "active_turn_prompt",
        "active_turn_progress",
        "tui_active_turn",
        "idle_prompt",
        "tui_idle_status",
    ]
    assert {rule.state for rule in HERMES} == {"blocked", "working", "idle"}


def test_a_blank_screen_matches_nothing():
    assert activity(HERMES, screen()) is None
    assert activity(HERMES, []) is None


@pytest.mark.parametrize("prompt", ["❯", "❯ ", "  ❯", "default ❯", "work.profile-2 ❯", "$", "›"])
def test_the_idle_prompt(prompt):
    assert activity(HERMES, screen("Welcome to Hermes Agent", "", prompt)) == "idle"


@pytest.mark.parametrize(
    "prompt", ["⚕ ❯", "  ⚕  ❯  ", "⚕ >", "⚕ ❯ msg=interrupt · /queue · /bg · /steer · Ctrl+C cancel", "⚕ ❯ next"]
)
def test_the_working_prompt(prompt):
    assert activity(HERMES, screen("user: list the files", "", prompt)) == "working"


def test_progress_above_a_displaced_prompt_is_working():
    assert activity(HERMES, screen("[thinking] looking at the tree", "")) == "working"
    assert activity(HERMES, screen("◆ aggregating results")) == "working"


def test_text_after_the_prompt_is_not_a_prompt():
    assert activity(HERMES, screen("❯ list the files")) is None


def test_the_approval_panel_beats_the_working_prompt():
    assert activity(HERMES, screen("user: clean up", *APPROVAL_PANEL, "⚕ ❯")) == "blocked"


def test_the_approval_prompt_blocks_and_beats_the_working_one():
    assert activity(HERMES, screen("↑/↓ to select, Enter to confirm", "⚠ ❯")) == "blocked"
    assert activity(HERMES, screen("⚕ ❯ msg=interrupt", "⚠ ❯")) == "blocked"
    assert activity(HERMES, screen("⚠ Approval: rm -rf build → denied", "❯")) == "idle"


def test_the_approval_panel_needs_its_title_and_a_choice():
    without_title = [line.replace("Dangerous Command", "Output") for line in APPROVAL_PANEL]
    assert activity(HERMES, screen(*without_title, "⚕ ❯")) == "working"
    assert activity(HERMES, screen("the Dangerous Command docs say Deny", "❯")) == "idle"


def test_needles_match_ignoring_case():
    assert activity(HERMES, screen("APPROVAL REQUIRED", "allow once", "deny")) == "blocked"


def test_blank_lines_inside_the_window_do_not_count_towards_it():
    # Twenty blank rows between the panel and the prompt: still within the last 24 non-empty lines.
    lines = [*APPROVAL_PANEL, *([""] * 20), "⚕ ❯"]
    assert activity(HERMES, screen(*lines, rows=len(lines))) == "blocked"


def test_old_transcript_lines_above_the_bottom_window_do_not_count():
    # An old working prompt scrolled up: the last 8 non-empty lines end at the idle prompt.
    transcript = ["⚕ ❯", *(f"output line {n}" for n in range(8)), "❯"]
    assert activity(HERMES, screen(*transcript)) == "idle"
    # An old approval panel more than 24 non-empty lines up no longer blocks.
    old_panel = [*APPROVAL_PANEL, *(f"output line {n}" for n in range(24)), "❯"]
    assert activity(HERMES, screen(*old_panel, rows=len(old_panel))) == "idle"


def test_a_fatal_start_anywhere_on_screen_blocks():
    lines = ["Failed to initialize agent: no model configured", *(f"hint {n}" for n in range(20)), "❯"]
    assert activity(HERMES, screen(*lines, rows=len(lines))) == "blocked"


def test_a_tie_goes_to_the_rule_listed_first():
    rules = load_rules(
        """
        [[rules]]
        id = "first"
        state = "idle"
        priority = 5
        region = "whole_recent"
        contains = ["x"]

        [[rules]]
        id = "second"
        state = "working"
        priority = 5
        region = "whole_recent"
        contains = ["x"]
        """
    )
    assert activity(rules, ["x"]) == "idle"
    assert activity(tuple(reversed(rules)), ["x"]) == "working"


def test_every_matcher_of_a_rule_must_hold():
    rules = load_rules(
        """
        [[rules]]
        id = "both"
        state = "blocked"
        priority = 1
        region = "bottom_non_empty_lines(3)"
        contains = ["panel"]
        line_regex = ['^ok$', '^go$']
        any = [{ contains = ["alpha"] }, { contains = ["beta"] }]
        """
    )
    assert activity(rules, ["panel beta", "ok", "go"]) == "blocked"
    assert activity(rules, ["panel beta", "", "ok", "  ", "go"]) == "blocked"  # blank lines are not counted
    assert activity(rules, ["panel beta", "ok", "go", "z"]) is None  # "panel beta" is outside the last 3 lines
    assert activity(rules, ["panel beta", "ok", "go on"]) is None  # no line is exactly "go"
    assert activity(rules, ["panel gamma", "ok", "go"]) is None  # no alternative holds
    assert activity(rules, ["alpha", "ok", "go"]) is None  # no "panel"


def test_a_hook_report_wins_over_the_screen():
    assert choose_activity("blocked", "working") == ("blocked", "report")
    assert choose_activity(None, "working") == ("working", "screen")
    assert choose_activity(None, None) == (None, "screen")


RULE = """
[[rules]]
id = "r"
state = "idle"
priority = 1
region = "whole_recent"
contains = ["x"]
"""


@pytest.mark.parametrize(
    "text",
    [
        "[[rules]\n",  # not TOML
        "",  # no rules
        "rules = []",
        "rules = 3",
        "[process]\ncomm = ['^hermes$']\n" + RULE,  # not part of our format
        RULE.replace('state = "idle"', 'state = "unknown"'),
        RULE.replace('state = "idle"', "state = 1"),
        RULE.replace('region = "whole_recent"', 'region = "osc_title"'),
        RULE.replace('region = "whole_recent"', 'region = "bottom_non_empty_lines(0)"'),
        RULE.replace('region = "whole_recent"', 'region = "bottom_non_empty_lines(08)"'),
        RULE.replace('region = "whole_recent"', 'region = "bottom_non_empty_lines(201)"'),
        RULE.replace('region = "whole_recent"', 'region = "bottom_non_empty_lines(x)"'),
        RULE.replace("priority = 1", 'priority = "1"'),
        RULE.replace("priority = 1", "priority = true"),
        RULE.replace("priority = 1", "priority = 2147483648"),
        RULE.replace("priority = 1\n", ""),
        RULE.replace('id = "r"\n', ""),
        RULE.replace('contains = ["x"]', ""),  # no matcher
        RULE.replace('contains = ["x"]', "contains = []"),
        RULE.replace('contains = ["x"]', 'contains = [""]'),
        RULE.replace('contains = ["x"]', 'contains = "x"'),
        RULE.replace('contains = ["x"]', "line_regex = ['^(unclosed$']"),
        RULE.replace('contains = ["x"]', "regex = ['x']"),  # outside the subset we implement
        RULE.replace('contains = ["x"]', "any = []"),
        RULE.replace('contains = ["x"]', "any = [{}]"),
        RULE.replace('contains = ["x"]', "any = [{ not = { contains = ['x'] } }]"),
        RULE + "skip_state_update = true\n",
        RULE.replace("priority = 1", "priority = 1\nvisible_blocker = 1"),
        RULE + RULE,  # two rules share an id
        "[[rules]]\n" + "".join(f"x{n} = 1\n" for n in range(3)),
    ],
)
def test_malformed_rules_are_refused_as_an_incompatible_runtime(text):
    with pytest.raises(DetectRulesInvalid) as caught:
        load_rules(text)
    assert caught.value.code == "runtime_incompatible"


def test_nesting_is_bounded():
    gate = "{ contains = ['x'] }"
    for _ in range(8):
        gate = f"{{ any = [{gate}] }}"
    with pytest.raises(DetectRulesInvalid):
        load_rules(RULE.replace('contains = ["x"]', f"any = [{gate}]"))


def test_an_oversized_file_is_refused_before_it_is_parsed():
    with pytest.raises(DetectRulesInvalid):
        load_rules(RULE + "#" * (256 * 1024))
