"""The errors every supervisor kind reports, defined once so that a caller catches one class
(and clients branch on one ``code``) whichever kind owns the gateway."""

from __future__ import annotations

from shared.errors import HermesError


class SupervisorError(HermesError, family=True):
    """A supervisor that owns (or should own) a gateway, and the units it reads."""


class SupervisorUnavailable(SupervisorError):
    code = "supervisor_unavailable"


class SupervisorFailed(SupervisorError):
    code = "supervisor_failed"


class SupervisorTimeout(SupervisorError):
    code = "supervisor_timeout"


class ScopePermissionDenied(SupervisorError):
    code = "permission_denied"


class UnitValueInvalid(SupervisorError):
    """A value (a home, an interpreter path) that the unit format cannot carry faithfully."""

    code = "unit_value_invalid"
