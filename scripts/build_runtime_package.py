"""Build the canonical archive of a runtime package directory and print its digest.

    python scripts/build_runtime_package.py DIR -o FILE [--verify] [--json] [--refresh-operator-manifest]

The Hermes package is built only when its operator payload matches ``operator.toml``;
``--refresh-operator-manifest`` first rewrites that allowlist from the payload as it is (what a
release does after changing the payload).
``--verify`` reads and builds the directory twice and requires identical bytes (``-o`` is then
optional). ``--json`` prints ``{"digest", "path", "files", "bytes"}`` instead of the digest
line. A failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import NoReturn

from runtime_package import manifests
from runtime_package.archive import Entry, build, digest
from runtime_package.archive_dir import entries_from_dir
from shared.errors import HermesError
from shared.files import write_bytes_atomic

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
    parser.add_argument(
        "--refresh-operator-manifest", action="store_true", help="rewrite operator.toml from the payload first"
    )
    args = parser.parse_args(argv)
    if args.output is None and not args.verify and not args.refresh_operator_manifest:
        raise _Failure("-o FILE is required (or --verify)")
    if args.refresh_operator_manifest:
        _refresh(args.directory)
        if args.output is None and not args.verify:
            return 0
    entries = entries_from_dir(args.directory)
    _check_contract(entries)
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


def _refresh(directory: Path) -> None:
    payload = {e.path: e.data for e in entries_from_dir(directory) if e.path != manifests.OPERATOR_MANIFEST}
    write_bytes_atomic(directory / manifests.OPERATOR_MANIFEST, manifests.operator_manifest_text(payload).encode())


def _check_contract(entries: list[Entry]) -> None:
    """The Hermes package's own contract, before anything is written."""
    files = {e.path: e.data for e in entries}
    try:
        identity = tomllib.loads(files.get(manifests.RUNTIME_MANIFEST, b"").decode()).get("id")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        identity = None
    if identity == manifests.PACKAGE_ID:
        manifests.operator_manifest(files, manifests.runtime_manifest(files))


if __name__ == "__main__":
    sys.exit(main())
