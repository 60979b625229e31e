"""One finding of ``hermes doctor``: what was checked, how it stands, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass
class Check:
    name: str
    status: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)
