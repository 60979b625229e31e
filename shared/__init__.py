"""What every hermes-mesh process needs and nothing service-specific.

Submodules are imported explicitly (``from shared import protocol``); this package
imports nothing itself so that a light process (the CLI) pays only for what it uses.
"""
