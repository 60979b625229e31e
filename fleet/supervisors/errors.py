"""The errors every supervisor kind reports, defined once so that a caller catches one class
(and clients branch on one ``code``) whichever kind owns the gateway."""

from __future__ import annotations

from shared.errors import HermesError


class SupervisorUnavailable(HermesError):
    code = "supervisor_unavailable"


class SupervisorFailed(HermesError):
    code = "supervisor_failed"


class SupervisorTimeout(HermesError):
    code = "supervisor_timeout"


class ScopePermissionDenied(HermesError):
    code = "permission_denied"


class UnitValueInvalid(HermesError):
    """A value (a home, an interpreter path) that the unit format cannot carry faithfully."""

    code = "unit_value_invalid"
