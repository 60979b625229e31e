"""The operator session daemon simulator: run as ``python -m simulators.operator_sim ADDRESS``.

Public: ``ops``, the simulator's own ops (``sim.records``, ``sim.counters``, ``sim.configure``)
beside the daemon's protocol (``shared.operator.protocol``).
"""

from simulators.operator_sim import ops

__all__ = ["ops"]
