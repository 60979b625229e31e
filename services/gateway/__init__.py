"""The gateway: serves agent turns for one profile, or (multiplex) several from one process;
owns each served profile's control socket, stamps the code it runs into each one's
``gateway_state.json``, drains on request.

Public: ``run_gateway``, the gateway in this process (``hermes gateway run``); its start-up
checks import nothing heavy. Clients talk to a gateway through ``shared.gateways``.
"""

from services.gateway.main import run_gateway

__all__ = ["run_gateway"]
