"""The testing page's tier table is counted, not typed (scripts/tier_counts.py): its rules on a
planted page. Collecting every tier takes seconds, so the check of the real page against a fresh
count runs in scripts/test.sh, beside lint and types."""

from __future__ import annotations

import tomllib

import pytest

from scripts import tier_counts
from tests.support.processes import ROOT

PAGE = f"""# Testing

{tier_counts.BEGIN}
| tier | what | tests | seconds |
|---|---|---|---|
| `tests/unit` | the pure rules | 10 | 3 |
| `tests/e2e` | several processes, the `hermes` CLI | 5 | 20 |
{tier_counts.END}

Times: as measured before.

The tiers are held.
"""


def test_a_count_the_suite_does_not_have_is_stale_and_a_rewrite_sets_it():
    counts = {"unit": 12, "e2e": 5}
    assert tier_counts.stale(PAGE, counts) == ["tests/unit: the page says 10, the suite has 12"]
    page = tier_counts.rewritten(PAGE, counts)
    assert tier_counts.stale(page, counts) == []
    assert "| `tests/unit` | the pure rules | 12 | 3 |" in page  # the time is left as it was
    assert page.replace("| 12 |", "| 10 |") == PAGE  # nothing else moved


def test_a_tier_on_one_side_only_is_stale_and_is_not_rewritten():
    assert tier_counts.stale(PAGE, {"unit": 10}) == ["tests/e2e: the page says 5, the suite has no such tier"]
    assert tier_counts.stale(PAGE, {"unit": 10, "e2e": 5, "compat": 1}) == [
        "tests/compat: the page says nothing, the suite has 1"
    ]
    with pytest.raises(ValueError, match="leaves out tests/compat"):
        tier_counts.rewritten(PAGE, {"unit": 10, "e2e": 5, "compat": 1})
    with pytest.raises(ValueError, match="tests/e2e, which collects no test"):
        tier_counts.rewritten(PAGE, {"unit": 10})


def test_times_are_summed_per_tier_from_a_run_and_the_page_says_which(tmp_path):
    junit = tmp_path / "run.xml"
    junit.write_text(
        '<testsuites><testsuite timestamp="2026-01-02T03:04:05.678">'
        '<testcase classname="tests.unit.test_a" name="t" time="1.25"/>'
        '<testcase classname="tests.unit.test_b" name="t" time="2.5"/>'
        '<testcase classname="tests.e2e.test_c.TestD" name="t" time="60"/>'
        "</testsuite></testsuites>"
    )
    seconds, started = tier_counts.measured(junit)
    assert (seconds, started) == ({"unit": 3.75, "e2e": 60.0}, "2026-01-02 03:04")
    page = tier_counts.with_measured_line(tier_counts.rewritten(PAGE, {"unit": 10, "e2e": 5}, seconds), started, 63.75)
    assert "| `tests/unit` | the pure rules | 10 | 4 |" in page and "| 5 | 60 |" in page
    assert "Times: seconds per tier summed from one serial run of the whole suite (2026-01-02 03:04 UTC" in page


def test_the_page_has_a_row_for_each_tier_pytest_runs_and_no_other():
    tiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    impossible = {path.removeprefix("tests/"): -1 for path in tiers}  # no row holds it: every tier is named
    problems = tier_counts.stale(tier_counts.PAGE.read_text(), impossible)
    assert sorted(problem.split(":")[0] for problem in problems) == sorted(tiers)
    assert [p for p in problems if "says nothing" in p or "no such tier" in p] == []
