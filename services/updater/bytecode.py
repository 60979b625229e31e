"""The tree's code compiled once per release, before anything restarts onto it.

Every process of an install imports the product's packages; compiled here once, each of them
reads the bytecode instead of compiling its imports itself (a fleet's gateways all start at
once, and compiling was much of their start-up). The compiled files are checked against their
source's hash when imported (``checked-hash``), never against its mtime: git rewrites mtimes,
and a rollback can bring back, within the same second, a file of the same size that a
timestamp would take for the one compiled; a hash never passes stale bytecode, whichever way
the tree moved. A file whose compiled form already matches its source is left as it is, so a
release that changes a few files compiles a few.

A file that cannot be compiled (a syntax error, a read-only tree, a full disk) is named with
its reason, never raised: whoever imports it compiles it from source, as without the sweep.

``python -m services.updater.bytecode [ROOT]`` compiles an install's tree (default: this one).
"""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.version import INSTALL_ROOT, PACKAGES

MODE = py_compile.PycInvalidationMode.CHECKED_HASH
# The flags word of a pyc checked against its source's hash (PEP 552): hash-based, checked.
_CHECKED_HASH_FLAGS = 0b11
# How many of the files that failed a follow-up names; the count says the rest.
NAMED = 3


@dataclass(frozen=True)
class Sweep:
    compiled: int
    fresh: int  # already compiled from the source on disk
    failed: tuple[tuple[str, str], ...]  # (path relative to the root, why)

    def to_dict(self) -> dict[str, Any]:
        return {"compiled": self.compiled, "fresh": self.fresh, "failed": len(self.failed)}

    def reason(self) -> str:
        """What a follow-up says of the files that failed."""
        named = "; ".join(f"{path}: {why}" for path, why in self.failed[:NAMED])
        more = f"; and {len(self.failed) - NAMED} more" if len(self.failed) > NAMED else ""
        return f"{len(self.failed)} of the tree's files not compiled: {named}{more}"


def compile_tree(root: Path, packages: tuple[str, ...] = PACKAGES) -> Sweep:
    """Compile every module of ``packages`` under ``root`` that has no bytecode matching its source."""
    compiled, fresh, failed = 0, 0, []
    for package in packages:
        for source in sorted((root / package).rglob("*.py")):
            if is_fresh(source):
                fresh += 1
                continue
            try:
                py_compile.compile(str(source), doraise=True, invalidation_mode=MODE)
            except py_compile.PyCompileError as exc:
                failed.append((str(source.relative_to(root)), _first_line(exc.exc_value)))
            except OSError as exc:
                failed.append((str(source.relative_to(root)), exc.strerror or str(exc)))
            else:
                compiled += 1
    return Sweep(compiled, fresh, tuple(failed))


def is_fresh(source: Path) -> bool:
    """Whether ``source`` has bytecode checked against its hash, and the hash is its own."""
    try:
        data = source.read_bytes()
        with open(importlib.util.cache_from_source(str(source)), "rb") as pyc:
            header = pyc.read(16)
    except OSError:
        return False
    return (
        header[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(header[4:8], "little") == _CHECKED_HASH_FLAGS
        and header[8:16] == importlib.util.source_hash(data)
    )


def _first_line(exc: BaseException) -> str:
    """A compile error in one line: its kind, message and line number."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sweep = compile_tree(Path(args[0]) if args else INSTALL_ROOT)
    if sweep.failed:
        print(f"bytecode: {sweep.reason()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
