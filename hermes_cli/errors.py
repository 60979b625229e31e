"""The command line's own errors: its family, and the refusals several commands share."""

from __future__ import annotations

from shared.errors import HermesError


class CliError(HermesError, family=True):
    """The command line itself: usage, confirmation, chat, skins, demos, a crash."""


class ConfirmationRequired(CliError):
    """A command that changes or removes something was not confirmed: nothing changed."""

    code = "confirmation_required"


class DemoFailed(CliError):
    """A step of a demo failed."""

    code = "demo_failed"


class NotATerminal(CliError):
    """A command that draws on a terminal was not given one."""

    code = "not_a_terminal"
