"""A home's ``config.yaml``: the one file in a home that operators edit by hand.

``load_config`` reads it as plain data. Code that rewrites it (a migration) loads a
``Document`` instead, edits its round-trip mapping in place and saves it: ruamel keeps the
operator's comments, key order, quoting and list indentation, and ``remove_key``, ``add_key``
and ``replace_value`` move a key without losing the comment lines around it.

A file is valid only as the safe loader reads it (no arbitrary tags), with a mapping at the
top, string keys and plain values (no dates, sets or binary). A rewrite that would not read
back is refused before the file is touched. These functions block; async code calls them
through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, MarkedYAMLError, YAMLError
from ruamel.yaml.tokens import CommentToken

from shared.errors import HomeError
from shared.files import PUBLIC_MODE, write_bytes_atomic
from shared.layout import CONFIG_FILE

MAX_BYTES = 1 << 20
# Wide enough that no value the operator wrote on one line is folded onto two.
_WIDTH = 4096
_DOC_START = re.compile(r"---(\s+#.*)?")
_KEY_ONLY = re.compile(r" *[^\s#-].*:(\s+#.*)?")


class ConfigError(HomeError):
    code = "config_invalid"

    def __init__(self, path: Path, key: str | None, reason: str) -> None:
        where = f"{path}, key {key}" if key else f"{path}"
        super().__init__(
            f"config file {where} is invalid: {reason}", detail={"path": str(path), "key": key, "reason": reason}
        )
        self.path = Path(path)
        self.key = key
        self.reason = reason


def config_path(home: Path) -> Path:
    return Path(home) / CONFIG_FILE


# --- plain reads ------------------------------------------------------------------------------


def load_config(home: Path) -> dict[str, Any]:
    """The config of ``home`` as plain data; ``{}`` when there is no file or it is empty."""
    path = config_path(home)
    text = _read(path)
    return {} if text is None else _plain_config(path, text)


def get(config: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``config["a"]["b"]["c"]`` for ``"a.b.c"``; ``default`` where a step is missing or not a mapping."""
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(path, None, f"it is larger than {MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, None, f"not UTF-8 (byte {exc.start})") from None


def _parse(path: Path, yaml: YAML, text: str) -> Any:
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(path, None, f"{where}{exc.problem or exc.context}") from None
    except YAMLError as exc:
        raise ConfigError(path, None, str(exc).strip().splitlines()[0]) from None
    except RecursionError:
        raise ConfigError(path, None, "it is nested too deeply") from None


def _plain_config(path: Path, text: str) -> dict[str, Any]:
    value = _parse(path, YAML(typ="safe", pure=True), text)
    if value is None:  # empty, or comments only
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, None, f"the top level is a {type(value).__name__}, not a mapping")
    return _plain(path, value, None, {}, set())


def _plain(path: Path, value: Any, key: str | None, done: dict[int, Any], open_: set[int]) -> Any:
    # The safe loader shares one object between an anchor and its aliases: convert it once, so
    # that a small file of nested aliases cannot expand into an enormous value.
    if isinstance(value, (dict, list)):
        if id(value) in open_:
            raise ConfigError(path, key, "it refers to itself through an alias")
        if id(value) in done:
            return done[id(value)]
        open_.add(id(value))
        if isinstance(value, dict):
            out: Any = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise ConfigError(path, key, f"the key {k!r} is not a string")
                out[k] = _plain(path, v, f"{key}.{k}" if key else k, done, open_)
        else:
            out = [_plain(path, v, f"{key}[{i}]", done, open_) for i, v in enumerate(value)]
        open_.discard(id(value))
        done[id(value)] = out
        return out
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise ConfigError(path, key, f"a {type(value).__name__} is not a config value (quote it if it is text)")


# --- round trip -------------------------------------------------------------------------------


@dataclass
class Document:
    """A ``config.yaml`` for rewriting: edit ``data`` in place, then ``save_document``."""

    data: CommentedMap
    exists: bool
    # What ruamel itself would drop: the lines up to a ``---``, or a file of comments only.
    head: str = ""
    # The file's own layout, so that a rewrite does not re-indent every list.
    mapping_indent: int = 2
    sequence_offset: int = 0


def load_document(home: Path) -> Document:
    """The config of ``home`` for rewriting; an empty ``Document`` (``exists`` False) when there is none.

    Raises ConfigError for exactly the files ``load_config`` refuses."""
    path = config_path(home)
    text = _read(path)
    if text is None:
        return Document(CommentedMap(), exists=False)
    _plain_config(path, text)
    data = _parse(path, _round_trip(), text)
    mapping_indent, sequence_offset = _layout(text)
    return Document(
        data if data is not None else CommentedMap(),
        exists=True,
        head=_head(text),
        mapping_indent=mapping_indent,
        sequence_offset=sequence_offset,
    )


def save_document(home: Path, doc: Document) -> None:
    """Write ``doc`` atomically, keeping the file's permission mode (a symlink's target is written)."""
    path = config_path(home)
    text = dump_document(doc)
    raw = text.encode("utf-8")
    try:
        if len(raw) > MAX_BYTES:
            raise ConfigError(path, None, f"it is larger than {MAX_BYTES} bytes")
        _plain_config(path, text)
    except ConfigError as exc:
        raise ConfigError(path, exc.key, f"the rewritten file would not read back: {exc.reason}") from None
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = PUBLIC_MODE
    write_bytes_atomic(target, raw, mode=mode)


def dump_document(doc: Document) -> str:
    """The text ``save_document`` writes."""
    if not doc.data:
        return doc.head
    yaml = _round_trip()
    yaml.indent(mapping=doc.mapping_indent, sequence=doc.sequence_offset + 2, offset=doc.sequence_offset)
    out = io.StringIO()
    yaml.dump(doc.data, out)
    return doc.head + out.getvalue()


def _round_trip() -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = _WIDTH
    return yaml


def _head(text: str) -> str:
    lines = text.splitlines(keepends=True)
    start = 0
    for i, line in enumerate(lines):
        bare = line.strip()
        if _DOC_START.fullmatch(bare):
            start = i + 1
        elif bare and not bare.startswith("#"):
            return "".join(lines[:start])
    head = "".join(lines)  # no content at all: ruamel keeps none of these comments
    return head if not head or head.endswith("\n") else head + "\n"


def _layout(text: str) -> tuple[int, int]:
    """(mapping indent, dash offset of a block list under its key) as the file uses them."""
    mapping_indent = sequence_offset = None
    parent = None  # the indent of the previous line when it was a key with no value on it
    for line in text.splitlines():
        bare = line.strip()
        if not bare or bare.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if parent is not None and indent > parent:
            if bare == "-" or bare.startswith("- "):
                sequence_offset = indent - parent if sequence_offset is None else sequence_offset
            elif mapping_indent is None:
                mapping_indent = indent - parent
        parent = indent if _KEY_ONLY.fullmatch(line.rstrip()) else None
    return mapping_indent or 2, sequence_offset or 0


# --- moving keys with their comments -----------------------------------------------------------
# ruamel keeps the comment lines that follow an entry on that entry's token, after its own
# end-of-line comment; for an entry holding a block collection, on the collection's last entry.
# Removing or appending an entry must move those lines, or they vanish or land out of place.


def eol_comment(mapping: CommentedMap, key: str) -> str | None:
    """The comment on ``key``'s own line, without the ``#``."""
    slots = mapping.ca.items.get(key)
    first = slots[2].value.split("\n", 1)[0].strip() if slots and slots[2] is not None else ""
    return first[1:].strip() if first.startswith("#") else None


def remove_key(mapping: CommentedMap, key: str) -> Any:
    """Remove ``key`` from the document's top-level mapping and return its value; the comment
    lines after it stay where they were."""
    keys = list(mapping)
    at = keys.index(key)
    lines = _detach_tail(mapping, key)
    value = mapping.pop(key)
    mapping.ca.items.pop(key, None)
    if lines and at > 0:
        _attach_tail(mapping, keys[at - 1], lines)
    elif lines:  # it was the first key: the lines join the comments that open the file
        opening = mapping.ca.comment = mapping.ca.comment or [None, None]
        opening[1] = [*(opening[1] or []), CommentToken(lines, CommentMark(0))]
    return value


def add_key(mapping: CommentedMap, key: str, value: Any, comment: str | None = None) -> None:
    """Append ``key`` to ``mapping``; the comment lines that closed the mapping still close it.
    Add a mapping or list value once it is filled: those lines go after its last entry."""
    lines = _detach_tail(mapping, next(reversed(mapping))) if mapping else ""
    mapping[key] = value
    if comment:
        mapping.yaml_add_eol_comment(f"# {comment}", key)
    _attach_tail(mapping, key, lines)


def replace_value(mapping: CommentedMap, key: str, value: Any) -> None:
    """Give ``key`` a new value in place; the comment lines that followed the old one follow it."""
    lines = _detach_tail(mapping, key)
    mapping[key] = value
    _attach_tail(mapping, key, lines)


def set_list(mapping: CommentedMap, key: str, items: list[Any]) -> None:
    """Give ``key`` the list ``items`` (added when it is missing), as a block list. An empty one
    is printed inline (``[]``): the comments made for its block lines go, the comment lines
    that followed it stay."""
    if key not in mapping:
        add_key(mapping, key, CommentedSeq(items))
        return
    replace_value(mapping, key, CommentedSeq(items))
    slots = mapping.ca.items.get(key)
    if not items and slots:
        _, _, lines = (slots[2].value if slots[2] is not None else "").partition("\n")
        del mapping.ca.items[key]
        _attach_tail(mapping, key, lines)


def _slots(container: CommentedMap | CommentedSeq, key: Any) -> list[Any]:
    return container.ca.items.setdefault(key, [None, None, None, None])


def _tail_slot(container: CommentedMap | CommentedSeq, key: Any) -> tuple[list[Any], int]:
    value = container[key]
    if isinstance(value, (CommentedMap, CommentedSeq)) and value and not value.fa.flow_style():
        last = next(reversed(value)) if isinstance(value, CommentedMap) else len(value) - 1
        return _tail_slot(value, last)
    return _slots(container, key), 2 if isinstance(container, CommentedMap) else 0


def _detach_tail(container: CommentedMap | CommentedSeq, key: Any) -> str:
    slots, i = _tail_slot(container, key)
    token = slots[i]
    if token is None:
        return ""
    own, _, lines = token.value.partition("\n")
    if own:
        token.value = own + "\n"
    else:
        slots[i] = None
    return lines


def _attach_tail(container: CommentedMap | CommentedSeq, key: Any, lines: str) -> None:
    if not lines:
        return
    slots, i = _tail_slot(container, key)
    if slots[i] is None:
        slots[i] = CommentToken("\n" + lines, CommentMark(0))  # "\n": the entry's own line has no comment
    else:
        own = slots[i].value
        slots[i].value = own + lines if own.endswith("\n") else f"{own}\n{lines}"
