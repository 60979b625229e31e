"""The gateway: serves agent turns for one profile, or (multiplex) several from one process;
owns each served profile's control socket, stamps the code it runs into each one's
``gateway_state.json``, drains on request.

Public: ``run_gateway``, the gateway in this process (``hermes gateway run``); its start-up
checks import nothing heavy. ``preload`` imports what a gateway runs without running it (a
gateway host's fork server, before it forks gateways). Clients talk to a gateway through ``shared.gateways``.
"""

from services.gateway.main import preload, run_gateway

__all__ = ["preload", "run_gateway"]
