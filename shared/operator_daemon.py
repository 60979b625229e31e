"""The operator daemon's report endpoint, in the mesh protocol: what the hook reporter
forwards to, and what ``services.operator_sim`` stands in for.

- ``report {report}`` → ``{"ok": true}``: one checked, payload-free lifecycle report
  (``shared.hook_reports.Report.to_wire``). Any error answer counts as not delivered.

Where the daemon listens is named by ``POHUNEK_DAEMON_ENDPOINT`` in the reporter's environment.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec

ENDPOINT_ENV = "POHUNEK_DAEMON_ENDPOINT"

REPORT = OpSpec("report", {"report": Field(dict, max_len=32)}, timeout=10.0)
