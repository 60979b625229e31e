"""The per-profile gateway: serves agent turns, owns the profile's control socket, stamps the
code it runs into ``gateway_state.json``, drains on request.

``services.gateway.ops`` is the light part (op specs and constants) that clients import.
"""
