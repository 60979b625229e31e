"""A simulator of the Nous portal's HTTP endpoints, for tests and the demo; run as
``python -m simulators.portal_sim``. Nothing in it is imported from outside: it is a process."""

__all__: list[str] = []
