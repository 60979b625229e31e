"""The gateway's control contract (``ops``): its ops, states and answers, as every process
that talks to a gateway reads them. The gateway process itself is ``services.gateway``;
finding and driving gateways is ``fleet``.
"""
