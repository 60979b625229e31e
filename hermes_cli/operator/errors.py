"""The family of every operator integration error: installing the operator plugin into Hermes."""

from __future__ import annotations

from shared.errors import HermesError


class IntegrationError(HermesError, family=True):
    """The operator plugin's integration with a Hermes home: target, source, probe, lifecycle."""
