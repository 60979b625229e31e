"""The mesh's long-running processes, one package each (``python -m services.<name>``)."""
