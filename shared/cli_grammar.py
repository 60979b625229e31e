"""The ``hermes`` command line's grammar: its commands, their flags and arguments.

One parser, built by ``build_top_level_parser()``, for the CLI that runs it and for the argv
matchers (``shared.command_lines``) that walk other processes' command lines the way it
would; so a flag added here is understood there without a second list. Building it imports
nothing but argparse.

Each command's parser sets ``command_words`` (``"gateway drain"``); which function runs a
command is the CLI's business (``hermes_cli.commands.TARGETS``).
"""

from __future__ import annotations

import argparse

from shared.version import __version__, code_sha


class _VersionAction(argparse.Action):
    """``--version``: the version and the commit of the code this command runs.

    An action, not a flag the CLI reads afterwards: it answers while the line is parsed, so
    ``hermes --version`` works whatever follows it, as argparse's own ``--help`` does. It is
    part of the grammar so that the parser the matchers read is the very one the CLI runs."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002 (argparse passes help=)
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sha = code_sha()
        print(f"hermes {__version__} ({sha[:12] if sha else 'no git checkout'})")
        parser.exit()


def _profile_option(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Accepted before and after the command; only the top level has a default, so a
    # subcommand without -p does not overwrite the value given before it.
    parser.add_argument(
        "-p",
        "--profile",
        metavar="NAME",
        default=None if top else argparse.SUPPRESS,
        help="run against this profile's home (default: the root home, or the profile HERMES_HOME points at)",
    )


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def _command(sub, words: str, summary: str, *, json: bool = True) -> argparse.ArgumentParser:
    """The parser of the command ``words`` (``"gateway drain"``), the last of which is its name."""
    parser = sub.add_parser(words.split()[-1], help=summary, description=summary)
    _profile_option(parser, top=False)
    if json:
        _json_option(parser)
    parser.set_defaults(command_words=words)
    return parser


def build_top_level_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes",
        description="Control plane for Hermes gateways, updates and sign-in.",
        epilog="Exit codes: 0 success, 1 failure, 2 usage error or refused, 130 interrupted.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and code commit, then exit")
    _profile_option(parser, top=True)
    parser.add_argument(
        "-m",
        "--model",
        metavar="MODEL",
        default=None,
        help="model for agent turns this command starts (exported as HERMES_MODEL to its processes)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    profile = commands.add_parser("profile", help="list, create, show and delete profiles")
    _profile_option(profile, top=False)
    profile_commands = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    _command(profile_commands, "profile list", "list every profile of this install")
    create = _command(profile_commands, "profile create", "create a profile")
    create.add_argument("name", help="profile name: ^[a-z0-9][a-z0-9_-]{0,63}$")
    show = _command(profile_commands, "profile show", "show one profile")
    show.add_argument("name", nargs="?", help="profile name (default: the active profile)")
    delete = _command(profile_commands, "profile delete", "delete a profile and all its files")
    delete.add_argument("name", help="profile name")
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    _command(
        commands,
        "doctor",
        "check homes, permissions, IPC endpoints, locks and dependencies",
    )
    _gateway_commands(commands)
    _mesh_commands(commands)
    _update_commands(commands)
    _auth_commands(commands)
    skin = commands.add_parser("skin", help="the CLI's look: built-in and user skins")
    _profile_option(skin, top=False)
    skin_actions = skin.add_subparsers(dest="skin_command", metavar="ACTION", required=True)
    _command(skin_actions, "skin list", "every skin, built in and in <home>/skins/")
    show = _command(skin_actions, "skin show", "one skin's colors, glyphs and words")
    show.add_argument("name", nargs="?", help="skin name (default: the active one)")
    choose = _command(skin_actions, "skin set", "use a skin for this profile (display.skin)")
    choose.add_argument("name", help="skin name")
    operator = commands.add_parser("operator", help="the operator daemon integration: lifecycle hooks")
    _profile_option(operator, top=False)
    operator_actions = operator.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    _command(
        operator_actions,
        "operator doctor",
        "a payload-free dry run of the hooks: session, identity, reporter, daemon",
    )
    demo = _command(
        commands,
        "demo",
        "build a demo install, run its mesh and update it live",
    )
    demo.add_argument("--home", metavar="DIR", help="where to build the demo (default: a new temporary directory)")
    demo.add_argument("--keep", action="store_true", help="leave the demo mesh running and its home in place")
    return parser


def _gateway_commands(commands) -> None:
    gateway = commands.add_parser("gateway", help="run, inspect and manage the per-profile gateways")
    _profile_option(gateway, top=False)
    # Bare ``hermes gateway`` runs the gateway, as the process matchers expect.
    gateway.set_defaults(command_words="gateway")
    actions = gateway.add_subparsers(dest="gateway_command", metavar="ACTION")
    _command(
        actions,
        "gateway run",
        "run the active profile's gateway in the foreground",
        json=False,
    )
    _command(actions, "gateway status", "every live gateway of this install")
    _command(actions, "gateway list", "every profile, with or without a gateway")
    drain = _command(actions, "gateway drain", "drain the active profile's gateway")
    drain.add_argument("--deadline", type=float, default=30.0, metavar="SECONDS", help="how long turns may finish")
    drain.add_argument("--stay", action="store_true", help="keep the gateway running after the drain")
    install = _command(
        actions,
        "gateway install",
        "write the supervisor unit for the active profile's gateway",
    )
    install.add_argument("--supervisor", required=True, choices=("supervisord", "systemd", "launchd"))
    install.add_argument("--scope", choices=("user", "system"), default="user", help="systemd/launchd scope")
    for action in ("start", "stop", "restart"):
        _command(
            actions, f"gateway {action}", f"{action} the active profile's gateway through the supervisor that owns it"
        )


def _update_commands(commands) -> None:
    update = _command(
        commands,
        "update",
        "update this install and move every gateway onto the new code",
    )
    update.add_argument("--plan", action="store_true", help="print what an update would do; change nothing")
    update.add_argument("--check", action="store_true", help="say whether an update is available; change nothing")
    backup = update.add_mutually_exclusive_group()
    backup.add_argument("--backup", action="store_true", help="also archive the whole root home for rollback")
    backup.add_argument("--no-backup", action="store_true", help="take no snapshot and no backup")
    update.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    update.add_argument("--branch", metavar="NAME", help="branch to update to (default: the current one)")

    logs = commands.add_parser("logs", help="what happened: update receipts")
    _profile_option(logs, top=False)
    kinds = logs.add_subparsers(dest="logs_command", metavar="KIND", required=True)
    update_logs = _command(kinds, "logs update", "the update receipts (root home)")
    update_logs.add_argument("--all", action="store_true", help="every kept receipt, newest first")
    update_logs.add_argument("--follow", action="store_true", help="follow an update in progress")


def _auth_commands(commands) -> None:
    auth = commands.add_parser("auth", help="sign in to a provider, and see or end the sign-in")
    _profile_option(auth, top=False)
    actions = auth.add_subparsers(dest="auth_command", metavar="ACTION", required=True)
    login = _command(actions, "auth login", "sign in with a device code (JSON lines with --json)")
    login.add_argument("provider", choices=("nous",), help="the provider to sign in to")
    login.add_argument("--replace", action="store_true", help="sign in again even when already signed in")
    login.add_argument("--no-browser", action="store_true", help="do not open the sign-in page in a browser")
    status = _command(actions, "auth status", "whether and as whom this install is signed in")
    status.add_argument("provider", choices=("nous",), help="the provider")
    guest = _command(actions, "auth guest", "start the free tier as a guest (apps move on sign-in)")
    guest.add_argument("provider", choices=("nous",), help="the provider")
    logout = _command(actions, "auth logout", "forget this install's sign-in")
    logout.add_argument("provider", choices=("nous",), help="the provider")


def _mesh_commands(commands) -> None:
    mesh = commands.add_parser("mesh", help="the embedded supervisor: one gateway per profile")
    _profile_option(mesh, top=False)
    actions = mesh.add_subparsers(dest="mesh_command", metavar="ACTION", required=True)
    up = _command(actions, "mesh up", "start the mesh (supervisord and its gateways)")
    up.add_argument("--profiles", metavar="A,B,...", help="profiles to run gateways for (default: all)")
    _command(actions, "mesh down", "stop the mesh; nothing is left running")
    _command(actions, "mesh status", "the mesh's supervisor and its programs")
    keys = actions.add_parser("keys", help="the CURVE keys of TCP endpoints (public keys only are shown)")
    _profile_option(keys, top=False)
    key_actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    _command(key_actions, "mesh keys init", "create the keys that are missing (never overwrites)")
    _command(key_actions, "mesh keys show", "this install's public keys and the keys it accepts and trusts")
    authorize = _command(
        key_actions, "mesh keys authorize", "accept a client's public key (or, with --server, trust a server's)"
    )
    authorize.add_argument("name", help="a name for the key (a-z, 0-9, '_', '-'; a server's: SERVICE[@PROFILE])")
    authorize.add_argument("key", help="the public key: 40 characters of Z85")
    authorize.add_argument("--server", action="store_true", help="a server's public key that clients trust")
    revoke = _command(key_actions, "mesh keys revoke", "stop accepting a client's key (or trusting a server's)")
    revoke.add_argument("name", help="the key's name")
    revoke.add_argument("--server", action="store_true", help="a trusted server's key")
    rotate = _command(key_actions, "mesh keys rotate", "replace the client keypair, or a service's")
    rotate.add_argument(
        "--service", metavar="NAME", action="append", default=[], help="a service's keypair (SERVICE[@PROFILE])"
    )
    rotate.add_argument("--client", action="store_true", help="the client keypair (the default without --service)")
    rotate.add_argument(
        "--grace", type=float, metavar="SECONDS", help="how long the old client key is still accepted (default 5)"
    )
