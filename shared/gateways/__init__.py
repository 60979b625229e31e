"""What every process knows of the install's gateways: their control protocol (``ops``) and
how to find every one of them (``discovery``). The gateway process itself is
``services.gateway``; the updater, the CLI and the demo talk to gateways through this package.
"""
