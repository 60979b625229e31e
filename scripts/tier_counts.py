"""The tier table of docs/testing.md, counted rather than typed.

    python scripts/tier_counts.py                 # rewrite the table's counts from a fresh collection
    python scripts/tier_counts.py --check         # exit 1 when the page's counts are not the suite's
    python scripts/tier_counts.py --timings FILE  # also write each tier's time from a run's JUnit XML

The counts are what pytest collects in each tier (one collection of all of them, in this
process). The times are summed per tier from a measured run (``pytest --junitxml FILE``: each
test's setup, call and teardown), and the page says which run; ``--check`` leaves them alone,
as they differ from run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

from shared.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "testing.md"
BEGIN = "<!-- tier table: counts by scripts/tier_counts.py -->"
END = "<!-- end of tier table -->"
_ROW = re.compile(r"^\| `tests/(?P<tier>\w+)` \|(?P<what>.*)\|\s*(?P<count>[^|]*?)\s*\|\s*(?P<time>[^|]*?)\s*\|$")
_MEASURED = re.compile(r"^Times: .*$", re.MULTILINE)


class _Collected:
    """A pytest plugin that counts the collected tests per tier."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.counts[_tier_of(item.nodeid.split("/"))] += 1


def _tier_of(parts: list[str]) -> str:
    """The tier of a test at ``parts`` (its node id's path, or its module's dotted name)."""
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def collected() -> Counter[str]:
    """How many tests each tier collects."""
    counter = _Collected()
    listing = io.StringIO()
    with contextlib.redirect_stdout(listing):  # pytest lists every test it collects
        done = pytest.main(
            ["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", "--rootdir", str(ROOT)], plugins=[counter]
        )
    if done != pytest.ExitCode.OK:
        raise SystemExit(f"tier_counts: collecting the suite failed ({done!r}):\n{listing.getvalue()[-2000:]}")
    return counter.counts


def measured(junit: Path) -> tuple[dict[str, float], str]:
    """Seconds per tier in the run ``junit`` reports, and when that run started."""
    tree = ET.parse(junit)
    seconds: dict[str, float] = {}
    for case in tree.iter("testcase"):
        tier = _tier_of(case.get("classname", "").split("."))
        seconds[tier] = seconds.get(tier, 0.0) + float(case.get("time", 0))
    suite = tree.find(".//testsuite")
    started = suite.get("timestamp", "") if suite is not None else ""
    return seconds, started[:16].replace("T", " ")


def rewritten(page: str, counts: Mapping[str, int], seconds: Mapping[str, float] | None = None) -> str:
    """``page`` with its tier table's counts (and times, when given) set; ValueError when the
    table, between its markers, names a tier the suite lacks or leaves one out."""
    head, table, tail = _split(page)
    rows = []
    seen = set()
    for line in table.splitlines():
        row = _ROW.match(line)
        if row is None:
            rows.append(line)
            continue
        tier = row["tier"]
        if tier not in counts:
            raise ValueError(f"the table names tests/{tier}, which collects no test")
        seen.add(tier)
        time = f"{seconds.get(tier, 0):.0f}" if seconds is not None else row["time"]
        rows.append(f"| `tests/{tier}` |{row['what']}| {counts[tier]} | {time} |")
    missing = sorted(set(counts) - seen)
    if missing:
        raise ValueError(f"the table leaves out {', '.join(f'tests/{t}' for t in missing)}")
    return head + "\n".join(rows) + "\n" + tail


def stale(page: str, counts: Mapping[str, int]) -> list[str]:
    """One line per tier whose count on the page is not ``counts``'s, or that one of them lacks."""
    _, table, _ = _split(page)
    on_page = {row["tier"]: row["count"] for row in map(_ROW.match, table.splitlines()) if row is not None}
    return [
        f"tests/{tier}: the page says {on_page.get(tier, 'nothing')}, the suite has {counts.get(tier, 'no such tier')}"
        for tier in sorted(set(on_page) | set(counts))
        if on_page.get(tier) != str(counts.get(tier))
    ]


def _split(page: str) -> tuple[str, str, str]:
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no tier table between {BEGIN!r} and {END!r}")
    start += len(BEGIN) + 1
    return page[:start], page[start:end].rstrip("\n"), page[end:]


def with_measured_line(page: str, started: str, total: float) -> str:
    line = f"Times: seconds per tier summed from one serial run of the whole suite ({started} UTC, {total / 60:.0f} min in all, on 2 cores shared with other work): setup, call and teardown of each test."
    return _MEASURED.sub(line, page, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tier_counts", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page's counts are stale")
    parser.add_argument("--timings", type=Path, metavar="FILE", help="a run's JUnit XML to take the times from")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    counts = collected()
    try:
        return _update(page, counts, args.check, args.timings)
    except ValueError as exc:
        print(f"tier_counts: docs/testing.md: {exc}", file=sys.stderr)
        return 1


def _update(page: str, counts: Mapping[str, int], check: bool, timings: Path | None) -> int:
    if check:
        problems = stale(page, counts)
        for problem in problems:
            print(f"docs/testing.md is stale: {problem} (run scripts/tier_counts.py)", file=sys.stderr)
        return 1 if problems else 0
    if timings is None:
        write_bytes_atomic(PAGE, rewritten(page, counts).encode())
        return 0
    seconds, started = measured(timings)
    write_bytes_atomic(
        PAGE, with_measured_line(rewritten(page, counts, seconds), started, sum(seconds.values())).encode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
