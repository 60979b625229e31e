"""``hermes``: parse, apply the profile, dispatch, map errors to exit codes.

Exit codes: 0 success, 1 failure, 2 usage error or refused, 130 interrupted.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

from hermes_cli.parser import build_top_level_parser

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130


def apply_profile(profile: str | None, model: str | None) -> None:
    """Point ``HERMES_HOME`` at the chosen profile before anything reads a home, so this
    process and every process it starts work on that profile."""
    from shared import homes

    if model:
        os.environ["HERMES_MODEL"] = model
    if profile is None:
        return
    home = homes.profile_home(profile, homes.root_home(), must_exist=True)
    os.environ[homes.HOME_ENV] = str(home)


def _load(target: str) -> Callable[..., int | None]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    parser = build_top_level_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "target", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_REFUSED
    from hermes_cli import output
    from shared.errors import HermesError

    try:
        apply_profile(args.profile, args.model)
        return _load(args.target)(args) or EXIT_OK
    except HermesError as exc:
        return output.error(args, exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
