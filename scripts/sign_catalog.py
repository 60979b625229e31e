"""Make a catalog signing key and sign runtime catalogs with it.

    sign_catalog.py keygen --out KEYFILE [--anchor ANCHOR.json] [--valid-days N]
    sign_catalog.py sign --key KEYFILE --sequence N [--expires-in-days D]
        --entry ARCHIVE:PACKAGE_ID:RUNTIME_ID:VERSION [--entry ...]
        [--platform TRIPLE ...] [--core RANGE] -o CATALOG.json

There is no production signing key (the trust anchor is a file): the tests and the demo make
a key per run with ``keygen``, whose ``--anchor`` names that key as the one root. ``sign``
hashes each archive, signs the catalog, and verifies the result against its own key before
writing it, so a catalog it writes is one the verifier accepts. A failure is one line on
stderr and exit 2; the key never appears in any output.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import NoReturn

from runtime_package import catalog, ed25519
from shared.files import SECRET_MODE, file_sha256, write_bytes_atomic

USAGE_EXIT = 2
DAY = 86400
ANCHOR_BACKDATE = 60  # a root valid from a minute ago tolerates a little clock skew
DEFAULT_VALID_DAYS = 365
DEFAULT_EXPIRES_IN_DAYS = 30
DEFAULT_CORE = ">=0.1.0, <1.0.0"
MAX_DAYS = 100 * 365
_SEED_TEXT = re.compile(r"[0-9a-f]{64}\n?")
_COUNT = re.compile(r"0|[1-9][0-9]{0,19}")


class Refused(Exception):
    """A failure to report as one line: the message is written for the operator."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would print the usage block too; the contract is one line.
        raise Refused(message)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "keygen":
            keygen(Path(args.out), Path(args.anchor) if args.anchor else None, args.valid_days)
        else:
            sign(args)
    except Refused as refused:
        print(f"sign_catalog: {refused}", file=sys.stderr)
        return USAGE_EXIT
    except catalog.CatalogError as exc:
        print(f"sign_catalog: the catalog would not verify: {exc.message}", file=sys.stderr)
        return USAGE_EXIT
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sign_catalog.py", description="Make catalog signing keys and sign runtime catalogs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    keygen_cmd = commands.add_parser("keygen", help="write a new Ed25519 signing key")
    keygen_cmd.add_argument("--out", required=True, help="the key file to create (mode 0600)")
    keygen_cmd.add_argument("--anchor", help="also write a trust anchor naming the key as its root")
    keygen_cmd.add_argument("--valid-days", type=_days, default=DEFAULT_VALID_DAYS, help="the root's validity")
    sign_cmd = commands.add_parser("sign", help="sign a catalog of package archives")
    sign_cmd.add_argument("--key", required=True, help="the signing key file")
    sign_cmd.add_argument("--sequence", required=True, type=_count, help="the catalog's anti-rollback counter")
    sign_cmd.add_argument("--expires-in-days", type=_days, default=DEFAULT_EXPIRES_IN_DAYS)
    sign_cmd.add_argument("--entry", action="append", required=True, help="ARCHIVE:PACKAGE_ID:RUNTIME_ID:VERSION")
    sign_cmd.add_argument("--platform", action="append", help="a target triple (default: this host's)")
    sign_cmd.add_argument("--core", default=DEFAULT_CORE, help=f"the core version range (default {DEFAULT_CORE!r})")
    sign_cmd.add_argument("-o", "--output", required=True, help="the catalog file to write")
    return parser


def _count(text: str) -> int:
    if not _COUNT.fullmatch(text) or int(text) >= 2**64:
        raise argparse.ArgumentTypeError("must be a non-negative integer below 2**64")
    return int(text)


def _days(text: str) -> int:
    if not _COUNT.fullmatch(text) or not 1 <= int(text) <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 1 to {MAX_DAYS}")
    return int(text)


def keygen(out: Path, anchor: Path | None, valid_days: int) -> None:
    if out.exists() or out.is_symlink():
        raise Refused(f"{out} already exists; a signing key is never overwritten")
    seed = os.urandom(ed25519.SEED_BYTES)
    now = int(time.time())
    root = (ed25519.public_bytes(seed), now - ANCHOR_BACKDATE, now + valid_days * DAY)
    try:
        write_bytes_atomic(out, (seed.hex() + "\n").encode("ascii"), mode=SECRET_MODE)
        if anchor is not None:
            write_bytes_atomic(anchor, catalog.anchor_document([root]))
    except OSError as exc:
        raise Refused(f"cannot write {exc.filename or out}: {exc.strerror}") from None


def sign(args: argparse.Namespace) -> None:
    seed = _read_seed(Path(args.key))
    now = int(time.time())
    platforms = args.platform or [catalog.host_platform()]
    body = {
        "schema_version": 1,
        "sequence": args.sequence,
        "expires_at": now + args.expires_in_days * DAY,
        "revoked_key_ids": [],
        "revoked_digests": [],
        "entries": [_entry(spec, platforms, args.core) for spec in args.entry],
    }
    document = catalog.sign_catalog(body, seed)
    public = ed25519.public_bytes(seed)
    own = catalog.Anchor((catalog.AnchorRoot(catalog.key_id(public), public, now, now + 1),), frozenset())
    catalog.verify(document, own, now=now, high_water=None)
    try:
        write_bytes_atomic(Path(args.output), document)
    except OSError as exc:
        raise Refused(f"cannot write {args.output}: {exc.strerror}") from None


def _entry(spec: str, platforms: list[str], core: str) -> dict[str, object]:
    # From the right: an archive path may itself hold a colon, the ids and version never do.
    parts = spec.rsplit(":", 3)
    if len(parts) != 4 or not all(parts):
        raise Refused("--entry must be ARCHIVE:PACKAGE_ID:RUNTIME_ID:VERSION")
    archive, package_id, runtime_id, version = parts
    try:
        digest = "sha256:" + file_sha256(Path(archive))
    except OSError as exc:
        raise Refused(f"cannot read the archive {archive}: {exc.strerror}") from None
    return {
        "package_id": package_id,
        "runtime_id": runtime_id,
        "version": version,
        "digest": digest,
        "platforms": list(platforms),
        "core": core,
    }


def _read_seed(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        text = path.read_bytes()
    except OSError as exc:
        raise Refused(f"cannot read the key {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise Refused(f"the key {path} is readable by others; make it mode 0600")
    if not _SEED_TEXT.fullmatch(text.decode("ascii", "replace")):
        raise Refused(f"the key {path} is not 64 lowercase hex characters")
    return bytes.fromhex(text.decode("ascii").strip())


if __name__ == "__main__":
    sys.exit(main())
