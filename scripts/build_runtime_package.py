"""Build the canonical archive of a runtime package directory and print its digest.

    python scripts/build_runtime_package.py DIR -o FILE [--verify] [--json]

``--verify`` reads and builds the directory twice and requires identical bytes (``-o`` is then
optional). ``--json`` prints ``{"digest", "path", "files", "bytes"}`` instead of the digest
line. A failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from shared.errors import HermesError
from shared.files import write_bytes_atomic
from shared.operator.archive import build, digest
from shared.operator.archive_dir import entries_from_dir

PROG = "build_runtime_package"
FAILED = 2


class _Usage(argparse.ArgumentParser):
    """argparse that fails with the script's one error line instead of its usage text."""

    def error(self, message: str) -> NoReturn:
        raise _Failure(message)


class _Failure(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except _Failure as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except HermesError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
    except OSError as exc:
        print(f"{PROG}: cannot write the archive: {exc.strerror}", file=sys.stderr)
    return FAILED


def _run(argv: list[str] | None) -> int:
    parser = _Usage(prog=PROG, description="Build the canonical archive of a runtime package.")
    parser.add_argument("directory", type=Path, help="the package directory")
    parser.add_argument("-o", "--output", type=Path, help="where to write the archive")
    parser.add_argument("--verify", action="store_true", help="build twice and require identical bytes")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of the digest")
    args = parser.parse_args(argv)
    if args.output is None and not args.verify:
        raise _Failure("-o FILE is required (or --verify)")
    entries = entries_from_dir(args.directory)
    archive = build(entries)
    if args.verify and build(entries_from_dir(args.directory)) != archive:
        raise _Failure("two builds of the directory differ")
    if args.output is not None:
        write_bytes_atomic(args.output, archive)
    if args.json:
        path = None if args.output is None else str(args.output)
        print(json.dumps({"digest": digest(archive), "path": path, "files": len(entries), "bytes": len(archive)}))
    else:
        print(digest(archive))
    return 0


if __name__ == "__main__":
    sys.exit(main())
