"""A stand-in for the operator daemon's report endpoint, for tests and the demo."""
