"""The operator hook reporter: bounded, payload-free lifecycle reports with process start identity.

Public: ``ops``, its control protocol (light: no trio, no zmq), for ``hermes operator doctor``.
Reports reach it on its intake (``shared.hooks``), are read by ``shared.hook_reports`` and go
on to the operator daemon (``shared.operator.protocol``).
"""

from services.hook_reporter import ops

__all__ = ["ops"]
