"""One module per command group; each exposes ``cmd_*(args) -> exit code``.

``TARGETS`` names the function that runs each command of the grammar
(``shared.cli_grammar``) as ``"module:function"``; the module is imported only on dispatch,
so a light command never pays for a heavy one's imports.
"""

TARGETS = {
    "profile list": "hermes_cli.commands.profile:cmd_list",
    "profile create": "hermes_cli.commands.profile:cmd_create",
    "profile show": "hermes_cli.commands.profile:cmd_show",
    "profile delete": "hermes_cli.commands.profile:cmd_delete",
    "doctor": "hermes_cli.commands.doctor:cmd_doctor",
    "gateway": "hermes_cli.commands.gateway:cmd_run",  # bare ``hermes gateway`` runs the gateway
    "gateway run": "hermes_cli.commands.gateway:cmd_run",
    "gateway status": "hermes_cli.commands.gateway_status:cmd_status",
    "gateway list": "hermes_cli.commands.gateway_status:cmd_list",
    "gateway drain": "hermes_cli.commands.gateway_status:cmd_drain",
    "gateway install": "hermes_cli.commands.gateway_manage:cmd_install",
    "gateway start": "hermes_cli.commands.gateway_manage:cmd_start",
    "gateway stop": "hermes_cli.commands.gateway_manage:cmd_stop",
    "gateway restart": "hermes_cli.commands.gateway_manage:cmd_restart",
    "mesh up": "hermes_cli.commands.mesh:cmd_up",
    "mesh down": "hermes_cli.commands.mesh:cmd_down",
    "mesh status": "hermes_cli.commands.mesh:cmd_status",
    "mesh keys init": "hermes_cli.commands.mesh_keys:cmd_init",
    "mesh keys show": "hermes_cli.commands.mesh_keys:cmd_show",
    "mesh keys authorize": "hermes_cli.commands.mesh_keys:cmd_authorize",
    "mesh keys revoke": "hermes_cli.commands.mesh_keys:cmd_revoke",
    "mesh keys rotate": "hermes_cli.commands.mesh_keys:cmd_rotate",
    "update": "hermes_cli.commands.update:cmd_update",
    "logs update": "hermes_cli.commands.update:cmd_logs",
    "snapshot list": "hermes_cli.commands.snapshot:cmd_list",
    "snapshot restore": "hermes_cli.commands.snapshot:cmd_restore",
    "auth login": "hermes_cli.commands.auth:cmd_login",
    "auth status": "hermes_cli.commands.auth:cmd_status",
    "auth guest": "hermes_cli.commands.auth:cmd_guest",
    "auth logout": "hermes_cli.commands.auth:cmd_logout",
    "skin list": "hermes_cli.commands.skin:cmd_list",
    "skin show": "hermes_cli.commands.skin:cmd_show",
    "skin set": "hermes_cli.commands.skin:cmd_set",
    "operator doctor": "hermes_cli.commands.operator:cmd_doctor",
    "operator probe": "hermes_cli.commands.operator:cmd_probe",
    "plugins list": "hermes_cli.commands.plugins:cmd_list",
    "plugins enable": "hermes_cli.commands.plugins:cmd_enable",
    "plugins disable": "hermes_cli.commands.plugins:cmd_disable",
    "demo": "hermes_cli.commands.demo:cmd_demo",
    "chat": "hermes_cli.commands.chat:cmd_chat",
}
