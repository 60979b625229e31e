"""The launch gate for ``hermes --version``: one grammar, used by the simulator before each
launch and by the integration when it installs the runtime.

The first line must read ``Hermes Agent v<major>.<minor>.<patch> (<build>)``, alone or continued
by `` · `` and anything (as the operator's installer reads it: this mesh puts its own version
there); later lines are free. A pre-release (``0.20.0-rc1``) or build suffix is refused rather
than guessed at.
"""

from __future__ import annotations

import re

from shared.operator.protocol import Code, OperatorError
from shared.version import METADATA_SEPARATOR

PARSER = "hermes-agent-v1"
MIN = (0, 20, 0)
BELOW = (1, 0, 0)
MAX_OUTPUT_BYTES = 4096

_NUMBER = r"(0|[1-9][0-9]{0,8})"
_FIRST_LINE = re.compile(
    rf"Hermes Agent v{_NUMBER}\.{_NUMBER}\.{_NUMBER} \([^()\r\n]+\)(?:{re.escape(METADATA_SEPARATOR)}[^\r\n]*)?"
)

Version = tuple[int, int, int]


class VersionProbeError(OperatorError):
    code = "version_unreadable"

    def __init__(self, code: str, message: str, *, detail: dict | None = None) -> None:
        super().__init__(message, detail=detail)
        self.code = code


def parse_version(text: str) -> Version:
    """The version on the first line of the output; ``version_unreadable`` for anything else."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_OUTPUT_BYTES:
        raise VersionProbeError("version_unreadable", f"the version output is over {MAX_OUTPUT_BYTES} bytes")
    first = text.split("\n", 1)[0].removesuffix("\r")  # a terminal ends lines with CRLF
    found = _FIRST_LINE.fullmatch(first)
    if found is None:
        raise VersionProbeError("version_unreadable", "the version output does not read 'Hermes Agent vX.Y.Z (...)'")
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch)


def accepts(version: Version, minimum: Version = MIN, below: Version = BELOW) -> bool:
    return minimum <= version < below


def dotted(version: Version) -> str:
    return ".".join(str(part) for part in version)


def check(text: str) -> Version:
    """The version, when it is one this project supports; ``agent_runtime_unsupported`` otherwise."""
    version = parse_version(text)
    if not accepts(version):
        raise VersionProbeError(
            Code.AGENT_RUNTIME_UNSUPPORTED,
            f"Hermes Agent {dotted(version)} is not supported: it must be at least {dotted(MIN)} and below {dotted(BELOW)}",
            detail={"version": dotted(version), "min": dotted(MIN), "below": dotted(BELOW)},
        )
    return version
