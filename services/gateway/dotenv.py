"""A home's ``.env``: the profile's secrets (API keys, tokens), as ``NAME=value`` lines.

Pure: text in, names and values out. The grammar is the common one: blank lines and ``#``
comments, an optional ``export`` prefix, a value bare (a `` #`` after it starts a comment)
or in single quotes (taken as written) or double quotes (``\\n``, ``\\"`` and ``\\\\``
understood). A line that is none of these is refused by its number alone: the value on it
may be a secret, so no message ever quotes it.
"""

from __future__ import annotations

import re

from shared.errors import HomeError

MAX_BYTES = 256 * 1024
_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")
_DOUBLE_ESCAPES = {"n": "\n", '"': '"', "\\": "\\"}


class DotenvInvalid(HomeError):
    code = "dotenv_invalid"


def parse(text: str, *, source: str = ".env") -> dict[str, str]:
    """Every ``NAME=value`` of ``text``; a name given twice keeps its last value."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise DotenvInvalid(f"{source} is larger than {MAX_BYTES} bytes", detail={"source": source})
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.fullmatch(stripped)
        value = _value(match.group(2)) if match else None
        if match is None or value is None:
            raise DotenvInvalid(
                f"{source}, line {number}: not a NAME=value line", detail={"source": source, "line": number}
            )
        found[match.group(1)] = value
    return found


def _value(raw: str) -> str | None:
    if raw[:1] == "'":
        end = raw.find("'", 1)
        return raw[1:end] if end > 0 and _only_comment(raw[end + 1 :]) else None
    if raw[:1] == '"':
        return _double_quoted(raw)
    return re.split(r"\s+#", raw, maxsplit=1)[0].strip()


def _double_quoted(raw: str) -> str | None:
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] in _DOUBLE_ESCAPES:
            out.append(_DOUBLE_ESCAPES[raw[i + 1]])
            i += 2
        elif ch == '"':
            return "".join(out) if _only_comment(raw[i + 1 :]) else None
        else:
            out.append(ch)
            i += 1
    return None  # no closing quote


def _only_comment(rest: str) -> bool:
    rest = rest.strip()
    return not rest or rest.startswith("#")
