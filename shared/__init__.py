"""The kernel: what two or more of the mesh's processes need, and nothing one service or one
domain owns. Errors, exit codes, the wire protocol, ids, identity, version, logs, redaction,
homes, config, files, locks, spawning and the workers' life, the hook client, the gateway's and
the operator daemon's contracts, and the transport (``shared.transport``, behind one face).

Submodules are imported explicitly (``from shared import protocol``); this package
imports nothing itself so that a light process (the CLI) pays only for what it uses.
"""
