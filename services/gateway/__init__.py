"""The gateway: serves agent turns for one profile, or (multiplex) several from one process;
owns each served profile's control socket, stamps the code it runs into each one's
``gateway_state.json``, drains on request.

Public: ``run_gateway``, the gateway in this process (``hermes gateway run``); its start-up
checks import nothing heavy. ``preload`` imports what a gateway runs without running it (a
gateway host's fork server, before it forks gateways); ``exit_now`` ends a gateway's process once its
work is done, its exit duties done and no teardown. Clients talk to a gateway through ``shared.gateways``.
"""

from services.gateway.drained_exit import exit_now
from services.gateway.main import preload, run_gateway

__all__ = ["exit_now", "preload", "run_gateway"]
