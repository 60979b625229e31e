"""A runtime's activity read off its screen, by the rules of its ``detect.toml``, and the one
rule for which source wins: a hook report over the screen.

The rule format (``runtime-packages/hermes/detect.toml`` documents it) is the subset of the
daemon's detection manifests that the Hermes rules use. Parsing is strict: a key, region or
state this module does not know refuses the whole file, so a rule never silently stops firing.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from typing import Any

from shared.operator.protocol import ACTIVITIES, Code, OperatorError

MAX_SOURCE_BYTES = 256 * 1024
MAX_RULES = 128
MAX_MATCHER_CHARS = 4096
MAX_DEPTH = 8
MAX_LINES = 200  # the daemon's largest screen

_RULE_KEYS = frozenset({"id", "state", "priority", "region", "visible_blocker"})
_GATE_KEYS = frozenset({"contains", "line_regex", "any"})
_BOTTOM = re.compile(r"bottom_non_empty_lines\(([1-9][0-9]{0,2})\)")


class DetectRulesInvalid(OperatorError):
    code = Code.RUNTIME_INCOMPATIBLE


@dataclass(frozen=True)
class Gate:
    """Holds when every needle and every line pattern holds, and one alternative (if any) does."""

    contains: tuple[str, ...]  # lower-cased: needles match ignoring case
    line_regex: tuple[re.Pattern[str], ...]
    any: tuple[Gate, ...]

    def holds(self, lines: list[str], lowered: str) -> bool:
        return (
            all(needle in lowered for needle in self.contains)
            and all(any(p.search(line) for line in lines) for p in self.line_regex)
            and (not self.any or any(gate.holds(lines, lowered) for gate in self.any))
        )


@dataclass(frozen=True)
class Rule:
    id: str
    state: str
    priority: int
    bottom: int | None  # bottom_non_empty_lines(N); None for whole_recent
    visible_blocker: bool
    gate: Gate

    def matches(self, non_empty: list[str]) -> bool:
        lines = non_empty if self.bottom is None else non_empty[-self.bottom :]
        return self.gate.holds(lines, "\n".join(lines).lower())


def load_rules(text: str) -> tuple[Rule, ...]:
    """The rules of one ``detect.toml``, in file order; ``runtime_incompatible`` for any fault."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise DetectRulesInvalid(f"the detection rules are over {MAX_SOURCE_BYTES} bytes")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DetectRulesInvalid(f"the detection rules are not valid TOML: {exc}") from None
    if set(document) - {"rules"}:
        raise _invalid(None, f"unknown top-level keys: {', '.join(sorted(set(document) - {'rules'}))}")
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules or len(raw_rules) > MAX_RULES:
        raise _invalid(None, f"'rules' must be a list of 1 to {MAX_RULES} tables")
    rules = tuple(_rule(raw) for raw in raw_rules)
    ids = [rule.id for rule in rules]
    if len(set(ids)) != len(ids):
        raise _invalid(None, "two rules share an id")
    return rules


def activity(rules: tuple[Rule, ...], visible_lines: list[str]) -> str | None:
    """The state of the highest-priority rule that matches (the first listed on a tie), or None."""
    non_empty = [line for line in visible_lines if line.strip()]
    best: Rule | None = None
    for rule in rules:
        if (best is None or rule.priority > best.priority) and rule.matches(non_empty):
            best = rule
    return None if best is None else best.state


def choose_activity(report: str | None, screen: str | None) -> tuple[str | None, str]:
    """``(activity, state_source)``: what the agent reported wins; the screen is the fallback."""
    if report is not None:
        return report, "report"
    return screen, "screen"


def _rule(raw: Any) -> Rule:
    if not isinstance(raw, dict):
        raise _invalid(None, "each rule must be a table")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise _invalid(None, "a rule has no 'id'")
    unknown = set(raw) - _RULE_KEYS - _GATE_KEYS
    if unknown:
        raise _invalid(rule_id, f"unknown keys: {', '.join(sorted(unknown))}")
    state, priority, region = raw.get("state"), raw.get("priority"), raw.get("region")
    if state not in ACTIVITIES:
        raise _invalid(rule_id, f"'state' must be one of {', '.join(sorted(ACTIVITIES))}")
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise _invalid(rule_id, "'priority' must be a 32-bit integer")
    visible_blocker = raw.get("visible_blocker", False)
    if not isinstance(visible_blocker, bool):
        raise _invalid(rule_id, "'visible_blocker' must be true or false")
    return Rule(
        id=rule_id,
        state=state,
        priority=priority,
        bottom=_region(rule_id, region),
        visible_blocker=visible_blocker,
        gate=_gate(rule_id, {key: raw[key] for key in _GATE_KEYS & set(raw)}, depth=1),
    )


def _region(rule_id: str, region: Any) -> int | None:
    if region == "whole_recent":
        return None
    found = _BOTTOM.fullmatch(region) if isinstance(region, str) else None
    if found is None or int(found.group(1)) > MAX_LINES:
        raise _invalid(rule_id, f"'region' must be whole_recent or bottom_non_empty_lines(1..{MAX_LINES})")
    return int(found.group(1))


def _gate(rule_id: str, raw: Any, depth: int) -> Gate:
    if depth > MAX_DEPTH:
        raise _invalid(rule_id, f"alternatives nest deeper than {MAX_DEPTH}")
    if not isinstance(raw, dict) or not raw:
        raise _invalid(rule_id, "a rule or alternative has no matcher")
    unknown = set(raw) - _GATE_KEYS
    if unknown:
        raise _invalid(rule_id, f"unknown keys: {', '.join(sorted(unknown))}")
    alternatives = raw.get("any", [])
    if not isinstance(alternatives, list) or ("any" in raw and not alternatives):
        raise _invalid(rule_id, "'any' must be a non-empty list of tables")
    return Gate(
        contains=tuple(needle.lower() for needle in _strings(rule_id, raw, "contains")),
        line_regex=tuple(_compile(rule_id, pattern) for pattern in _strings(rule_id, raw, "line_regex")),
        any=tuple(_gate(rule_id, alternative, depth + 1) for alternative in alternatives),
    )


def _strings(rule_id: str, raw: dict[str, Any], key: str) -> list[str]:
    if key not in raw:
        return []
    values = raw[key]
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, str) and 0 < len(v) <= MAX_MATCHER_CHARS for v in values)
    ):
        raise _invalid(rule_id, f"{key!r} must be a non-empty list of strings of 1 to {MAX_MATCHER_CHARS} characters")
    return values


def _compile(rule_id: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise _invalid(rule_id, f"a line_regex does not compile: {exc}") from None


def _invalid(rule_id: str | None, message: str) -> DetectRulesInvalid:
    where = "the detection rules" if rule_id is None else f"detection rule {rule_id!r}"
    return DetectRulesInvalid(f"{where}: {message}", detail=None if rule_id is None else {"rule": rule_id})
