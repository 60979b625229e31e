"""The guest-handoff retry worker: finishes the handoffs any process left to retry.

Its face is the control protocol (``ops``), light for a client; the handoff itself is
``nous.guest_handoff``. The process is ``python -m services.handoff_retry``.
"""

from services.handoff_retry import ops

__all__ = ["ops"]
