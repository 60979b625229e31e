"""The operator daemon's report endpoint, as the reporter speaks it (the mesh protocol).

- ``report {report}`` → ``{"ok": true}``: one checked, payload-free lifecycle report
  (``Report.to_wire``). Any error answer counts as not delivered.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec

REPORT = OpSpec("report", {"report": Field(dict, max_len=32)}, timeout=10.0)
