"""The operator session daemon's wire rules, shared by the simulator, the client and the CLI."""
