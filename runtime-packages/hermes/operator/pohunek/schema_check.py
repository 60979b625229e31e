"""A JSON Schema check for exactly the keywords the tools' schemas use, standard library only.

``type``, ``enum``, ``oneOf``, ``minLength``, ``maxLength``, ``pattern``, ``minimum``,
``maximum``, ``items``, ``minItems``, ``maxItems``, ``uniqueItems``, ``properties``,
``required``, ``additionalProperties: false`` and ``minProperties``, with draft-07's meaning;
annotations (``$schema``, ``description``) are ignored, and any other keyword is refused when
a schema is first checked, so a schema cannot silently ask for more than this enforces.

A failure is ``Invalid`` naming the dotted path of the argument at fault: for an object's own
rule (a missing or unknown key) the key itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

ANNOTATIONS = frozenset({"$schema", "description"})
KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "oneOf",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
    }
)
# An object's checks that come before its properties are looked at, as draft-07 checkers do.
ObjectRule = Callable[[Mapping[str, Any]], str | None]

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_PATTERNS: dict[str, re.Pattern[str]] = {}


class Invalid(Exception):
    def __init__(self, path: tuple[str, ...]):
        super().__init__(".".join(path))
        self.field = ".".join(path)


def supported(schema: Mapping[str, Any]) -> None:
    """Refuse a schema that uses a keyword this module does not enforce (a bug, not input)."""
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"unsupported schema keywords: {sorted(unknown)}")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError("only additionalProperties: false is supported")
    for child in schema.get("properties", {}).values():
        supported(child)
    for branch in schema.get("oneOf", ()):
        supported(branch)
    if "items" in schema:
        supported(schema["items"])


def _pattern(text: str) -> re.Pattern[str]:
    found = _PATTERNS.get(text)
    if found is None:
        # "$" ends the text, as JSON Schema means it, not before a final newline as Python's does.
        found = _PATTERNS[text] = re.compile(re.sub(r"(?<!\\)\$", r"\\Z", text))
    return found


def check(schema: Mapping[str, Any], value: Any, object_rule: ObjectRule | None = None) -> None:
    """``value`` against ``schema``; ``object_rule`` runs on the top object after ``required``
    and answers the key at fault, or None."""
    _check(schema, value, (), object_rule)


def _check(schema: Mapping[str, Any], value: Any, path: tuple[str, ...], object_rule: ObjectRule | None) -> None:
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPES[name](value) for name in names):
            raise Invalid(path)
    if "enum" in schema and not any(type(value) is type(item) and value == item for item in schema["enum"]):
        raise Invalid(path)
    if "oneOf" in schema and sum(_passes(branch, value, path) for branch in schema["oneOf"]) != 1:
        raise Invalid(path)
    if isinstance(value, str):
        _check_text(schema, value, path)
    elif isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            raise Invalid(path)
    elif isinstance(value, list):
        _check_list(schema, value, path)
    elif isinstance(value, dict):
        _check_object(schema, value, path, object_rule)


def _passes(schema: Mapping[str, Any], value: Any, path: tuple[str, ...]) -> bool:
    try:
        _check(schema, value, path, None)
    except Invalid:
        return False
    return True


def _check_text(schema: Mapping[str, Any], value: str, path: tuple[str, ...]) -> None:
    if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
        raise Invalid(path)
    if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
        raise Invalid(path)


def _check_list(schema: Mapping[str, Any], value: list[Any], path: tuple[str, ...]) -> None:
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
        raise Invalid(path)
    # Only scalars are compared (every array a tool takes holds words): an item that is not one
    # fails ``items`` instead, and no nesting is ever walked here.
    scalars = all(v is None or isinstance(v, (str, int)) for v in value)
    if schema.get("uniqueItems") and scalars and len({(type(v), v) for v in value}) != len(value):
        raise Invalid(path)
    if "items" in schema:
        for index, item in enumerate(value):
            _check(schema["items"], item, (*path, str(index)), None)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], path: tuple[str, ...], object_rule: ObjectRule | None
) -> None:
    if len(value) < schema.get("minProperties", 0):
        raise Invalid(path)
    missing = next((key for key in schema.get("required", ()) if key not in value), None)
    if missing is not None:
        raise Invalid((*path, missing))
    if object_rule is not None:
        wrong = object_rule(value)
        if wrong is not None:
            raise Invalid((*path, wrong))
    properties = schema.get("properties", {})
    for key, child in properties.items():
        if key in value:
            _check(child, value[key], (*path, key), None)
    if schema.get("additionalProperties", True) is False:
        extra = min((key for key in value if key not in properties), default=None)
        if extra is not None:
            raise Invalid((*path, extra))
