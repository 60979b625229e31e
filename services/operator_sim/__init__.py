"""A stand-in for the operator daemon's report endpoint (``shared.operator_daemon``), for tests
and the demo; run as ``python -m services.operator_sim ADDRESS``.

Public: ``ops``, the simulator's own ops (``records``, ``configure``) beside the daemon's ``report``.
"""

from services.operator_sim import ops

__all__ = ["ops"]
