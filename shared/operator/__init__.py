"""The operator session daemon's contract: its wire rules and version window (``protocol``), u64
cursors, the version probe, the blocking client and the tool calls the plugin makes, and the
plugin's policy (``hosts``, ``policy``, ``policy_file``). The plugin payload imports some of
these by path from a Hermes home, so their paths are pinned (``tests/compat``)."""
