"""The ``hermes`` argument parser.

``build_top_level_parser()`` is public: the process-identity matchers in
``shared.identity`` derive the set of value-taking flags from it, so a flag added here
is understood there without a second list. Building it imports nothing but argparse.
Each command names its implementation as ``"module:function"``, imported on dispatch.
"""

from __future__ import annotations

import argparse

from shared.version import __version__


class _VersionAction(argparse.Action):
    """``--version``: the version and the commit of the code this command runs."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002 (argparse passes help=)
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from shared.version import code_sha

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


def _command(sub, name: str, target: str, summary: str, *, json: bool = True) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=summary, description=summary)
    _profile_option(parser, top=False)
    if json:
        _json_option(parser)
    parser.set_defaults(target=target)
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
    _command(profile_commands, "list", "hermes_cli.commands.profile:cmd_list", "list every profile of this install")
    create = _command(profile_commands, "create", "hermes_cli.commands.profile:cmd_create", "create a profile")
    create.add_argument("name", help="profile name: ^[a-z0-9][a-z0-9_-]{0,63}$")
    show = _command(profile_commands, "show", "hermes_cli.commands.profile:cmd_show", "show one profile")
    show.add_argument("name", nargs="?", help="profile name (default: the active profile)")
    delete = _command(
        profile_commands, "delete", "hermes_cli.commands.profile:cmd_delete", "delete a profile and all its files"
    )
    delete.add_argument("name", help="profile name")
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    _command(
        commands,
        "doctor",
        "hermes_cli.commands.doctor:cmd_doctor",
        "check homes, permissions, IPC endpoints, locks and dependencies",
    )
    _gateway_commands(commands)
    _mesh_commands(commands)
    _update_commands(commands)
    _auth_commands(commands)
    skin = commands.add_parser("skin", help="the CLI's look: built-in and user skins")
    _profile_option(skin, top=False)
    skin_actions = skin.add_subparsers(dest="skin_command", metavar="ACTION", required=True)
    _command(skin_actions, "list", "hermes_cli.commands.skin:cmd_list", "every skin, built in and in <home>/skins/")
    show = _command(skin_actions, "show", "hermes_cli.commands.skin:cmd_show", "one skin's colors, glyphs and words")
    show.add_argument("name", nargs="?", help="skin name (default: the active one)")
    choose = _command(
        skin_actions, "set", "hermes_cli.commands.skin:cmd_set", "use a skin for this profile (display.skin)"
    )
    choose.add_argument("name", help="skin name")
    operator = commands.add_parser("operator", help="the operator daemon integration: lifecycle hooks")
    _profile_option(operator, top=False)
    operator_actions = operator.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    _command(
        operator_actions,
        "doctor",
        "hermes_cli.commands.operator:cmd_doctor",
        "a payload-free dry run of the hooks: session, identity, reporter, daemon",
    )
    demo = _command(
        commands,
        "demo",
        "hermes_cli.commands.demo:cmd_demo",
        "build a demo install, run its mesh and update it live",
    )
    demo.add_argument("--home", metavar="DIR", help="where to build the demo (default: a new temporary directory)")
    demo.add_argument("--keep", action="store_true", help="leave the demo mesh running and its home in place")
    return parser


def _gateway_commands(commands) -> None:
    gateway = commands.add_parser("gateway", help="run, inspect and manage the per-profile gateways")
    _profile_option(gateway, top=False)
    # Bare ``hermes gateway`` runs the gateway, as the process matchers expect.
    gateway.set_defaults(target="hermes_cli.commands.gateway:cmd_run")
    actions = gateway.add_subparsers(dest="gateway_command", metavar="ACTION")
    _command(
        actions,
        "run",
        "hermes_cli.commands.gateway:cmd_run",
        "run the active profile's gateway in the foreground",
        json=False,
    )
    _command(actions, "status", "hermes_cli.commands.gateway_status:cmd_status", "every live gateway of this install")
    _command(actions, "list", "hermes_cli.commands.gateway_status:cmd_list", "every profile, with or without a gateway")
    drain = _command(
        actions, "drain", "hermes_cli.commands.gateway_status:cmd_drain", "drain the active profile's gateway"
    )
    drain.add_argument("--deadline", type=float, default=30.0, metavar="SECONDS", help="how long turns may finish")
    drain.add_argument("--stay", action="store_true", help="keep the gateway running after the drain")
    install = _command(
        actions,
        "install",
        "hermes_cli.commands.gateway_manage:cmd_install",
        "write the supervisor unit for the active profile's gateway",
    )
    install.add_argument("--supervisor", required=True, choices=("supervisord", "systemd", "launchd"))
    install.add_argument("--scope", choices=("user", "system"), default="user", help="systemd/launchd scope")
    for action, words in (("start", "start"), ("stop", "stop"), ("restart", "restart")):
        _command(
            actions,
            action,
            f"hermes_cli.commands.gateway_manage:cmd_{action}",
            f"{words} the active profile's gateway through the supervisor that owns it",
        )


def _update_commands(commands) -> None:
    update = _command(
        commands,
        "update",
        "hermes_cli.commands.update:cmd_update",
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
    update_logs = _command(kinds, "update", "hermes_cli.commands.update:cmd_logs", "the update receipts (root home)")
    update_logs.add_argument("--all", action="store_true", help="every kept receipt, newest first")
    update_logs.add_argument("--follow", action="store_true", help="follow an update in progress")


def _auth_commands(commands) -> None:
    auth = commands.add_parser("auth", help="sign in to a provider, and see or end the sign-in")
    _profile_option(auth, top=False)
    actions = auth.add_subparsers(dest="auth_command", metavar="ACTION", required=True)
    login = _command(
        actions, "login", "hermes_cli.commands.auth:cmd_login", "sign in with a device code (JSON lines with --json)"
    )
    login.add_argument("provider", choices=("nous",), help="the provider to sign in to")
    login.add_argument("--replace", action="store_true", help="sign in again even when already signed in")
    login.add_argument("--no-browser", action="store_true", help="do not open the sign-in page in a browser")
    status = _command(
        actions, "status", "hermes_cli.commands.auth:cmd_status", "whether and as whom this install is signed in"
    )
    status.add_argument("provider", choices=("nous",), help="the provider")
    guest = _command(
        actions, "guest", "hermes_cli.commands.auth:cmd_guest", "start the free tier as a guest (apps move on sign-in)"
    )
    guest.add_argument("provider", choices=("nous",), help="the provider")
    logout = _command(actions, "logout", "hermes_cli.commands.auth:cmd_logout", "forget this install's sign-in")
    logout.add_argument("provider", choices=("nous",), help="the provider")


def _mesh_commands(commands) -> None:
    mesh = commands.add_parser("mesh", help="the embedded supervisor: one gateway per profile")
    _profile_option(mesh, top=False)
    actions = mesh.add_subparsers(dest="mesh_command", metavar="ACTION", required=True)
    up = _command(actions, "up", "hermes_cli.commands.mesh:cmd_up", "start the mesh (supervisord and its gateways)")
    up.add_argument("--profiles", metavar="A,B,...", help="profiles to run gateways for (default: all)")
    _command(actions, "down", "hermes_cli.commands.mesh:cmd_down", "stop the mesh; nothing is left running")
    _command(actions, "status", "hermes_cli.commands.mesh:cmd_status", "the mesh's supervisor and its programs")
