"""Finding and driving an install's gateways: ``discovery`` (every gateway of an install, by its
socket, its state file, or a scan), ``state_record`` (what a ``gateway_state.json`` says and
when it vouches for its process), ``own_answer`` (one gateway's status, taken only from the
process it names), ``command_lines`` and ``cli_grammar`` (the canonical argv
matchers and the ``hermes`` grammar they take their flags from), and ``supervisors`` (the
supervisor kinds that can own a gateway). The updater, the gateway and the CLI use it; it
needs only the kernel (``shared``)."""
