"""The ``core`` range of a catalog entry: which core versions a package supports.

A range is comma-separated comparators, each ``>=``, ``>``, ``<``, ``<=`` or ``=`` and an
``X.Y.Z`` version (``">=0.1.0, <0.2.0"``). That is the subset of Rust's semver ``VersionReq``
Pohunek's catalogs use; anything else (carets, wildcards, pre-releases, partial versions) is
refused rather than read some other way. Every comparator bounds the version, so a non-empty
range always constrains it. (P).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

CORE_RANGE_MAX_BYTES = 128

Version = tuple[int, int, int]
Comparator = tuple[str, Version]

_NUMBER = r"(0|[1-9][0-9]{0,18})"
_VERSION = re.compile(rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}")
_COMPARATOR = re.compile(rf" *(>=|<=|>|<|=) *({_NUMBER}\.{_NUMBER}\.{_NUMBER}) *")
_TESTS: dict[str, Callable[[Version, Version], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
}


def parse_version(text: object) -> Version | None:
    """``X.Y.Z`` as three integers, or None."""
    found = _VERSION.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch)


def parse_range(text: str) -> tuple[Comparator, ...] | None:
    """The comparators of ``text``, or None when it is empty, too long or not in the grammar."""
    if not text or len(text.encode("utf-8", "surrogatepass")) > CORE_RANGE_MAX_BYTES:
        return None
    comparators: list[Comparator] = []
    for part in text.split(","):
        found = _COMPARATOR.fullmatch(part)
        version = parse_version(found.group(2)) if found else None
        if found is None or version is None:
            return None
        comparators.append((found.group(1), version))
    return tuple(comparators)


def in_range(version: Version, comparators: tuple[Comparator, ...]) -> bool:
    """Whether ``version`` satisfies every comparator (an empty range satisfies nothing)."""
    return bool(comparators) and all(_TESTS[op](version, bound) for op, bound in comparators)
