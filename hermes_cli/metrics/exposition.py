"""The OpenMetrics text exposition (https://openmetrics.io, 1.0.0): metric families in, text
out. No I/O, and nothing of what the metrics mean (``hermes_cli.metrics.families`` says that)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TYPES = frozenset({"gauge", "counter", "histogram"})
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
INF = "+Inf"


class Sample(NamedTuple):
    suffix: str  # appended to the family's name: "", "_total", "_bucket", "_count", "_sum"
    labels: Mapping[str, str]
    value: float


class Family(NamedTuple):
    name: str
    type: str
    help: str
    samples: tuple[Sample, ...]
    unit: str = ""  # when set, ``name`` ends with ``_<unit>``, as the format asks


def number(value: float) -> str:
    """A sample's value, or a label's (``le``): integers without a point, floats as Python
    writes them shortest (``0.005``, ``1.0``), infinities as the format spells them."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(text: str, *, quote: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value, quote=True)}"' for name, value in labels.items()) + "}"


def render(families: Iterable[Family]) -> str:
    """The exposition of ``families``, ending ``# EOF``. A family of an unknown type, or a name
    the format cannot hold, is a bug here, not an input to forgive (ValueError)."""
    lines = []
    for family in families:
        if family.type not in TYPES or not _NAME.match(family.name):
            raise ValueError(
                f"not a metric family: {family.name!r} of type {family.type!r}"
            )  # Not a HermesError: a bug
        if family.unit and not family.name.endswith(f"_{family.unit}"):
            raise ValueError(f"{family.name} must end with its unit {family.unit}")  # Not a HermesError: a bug
        lines.append(f"# TYPE {family.name} {family.type}")
        if family.unit:
            lines.append(f"# UNIT {family.name} {family.unit}")
        lines.append(f"# HELP {family.name} {_escape(family.help, quote=True)}")
        for sample in family.samples:
            if not all(_LABEL.match(name) for name in sample.labels):
                raise ValueError(
                    f"a label name of {family.name} is not one: {list(sample.labels)}"
                )  # Not a HermesError: a bug
            lines.append(f"{family.name}{sample.suffix}{_labels(sample.labels)} {number(sample.value)}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def histogram(
    labels: Mapping[str, str], bounds: Iterable[object], counts: Iterable[object], total: object
) -> tuple[Sample, ...] | None:
    """The samples of one histogram from its cumulative ``counts`` per upper bound (the last
    ``"+Inf"``) and the ``total`` of what it observed; None when they are not one: bounds not
    ascending or not ending in +Inf, counts not whole, not cumulative or not as many."""
    bounds, counts = list(bounds), list(counts)
    if not bounds or len(bounds) != len(counts) or bounds[-1] != INF:
        return None
    finite = bounds[:-1]
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in finite):
        return None
    if any(a >= b for a, b in zip(finite, finite[1:], strict=False)):  # type: ignore[operator]
        return None
    if not all(type(c) is int and c >= 0 for c in counts) or counts != sorted(counts):  # type: ignore[type-var]
        return None
    if not isinstance(total, (int, float)) or isinstance(total, bool) or not math.isfinite(total) or total < 0:
        return None
    buckets = tuple(
        Sample("_bucket", {**labels, "le": INF if bound == INF else number(float(bound))}, count)  # type: ignore[arg-type]
        for bound, count in zip(bounds, counts, strict=True)
    )
    return (*buckets, Sample("_count", labels, counts[-1]), Sample("_sum", labels, float(total)))  # type: ignore[arg-type]
