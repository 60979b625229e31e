"""One module per command group; each exposes ``cmd_*(args) -> exit code``."""
