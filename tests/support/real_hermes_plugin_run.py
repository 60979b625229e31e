"""Run by the REAL Hermes Agent's own interpreter (``python -I -B``, so nothing of this checkout
is importable): load the plugins of ``$HERMES_HOME`` with the real ``PluginManager``, then call
the operator tools named on the command line through the real ``tools.registry``, and print one
JSON object: what loaded, the schemas a model would see, and each call's answer.

    python -I -B real_hermes_plugin_run.py '[["pohunek_hosts", {}], ...]'
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from hermes_cli.plugins import get_plugin_manager

    manager = get_plugin_manager()
    manager.discover_and_load()
    plugins = {
        key: {
            "enabled": loaded.enabled,
            "error": loaded.error,
            "tools": sorted(loaded.tools_registered),
            "hooks": sorted(loaded.hooks_registered),
        }
        for key, loaded in manager._plugins.items()
        if loaded.manifest.name == "pohunek"
    }
    import model_tools
    from tools.registry import registry

    definitions = model_tools.get_tool_definitions(enabled_toolsets=["pohunek"], quiet_mode=True)
    seen = {d["function"]["name"]: d["function"] for d in definitions if d["function"]["name"].startswith("pohunek_")}
    answers = []
    for name, args, until in json.loads(sys.argv[1]):
        # ``until``: a text the answer must hold, tried again for a bounded while (a new
        # session's screen fills in after its start).
        deadline = time.monotonic() + 30
        while True:
            answer = registry.dispatch(name, args)
            if not until or until in answer or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        answers.append(json.loads(answer))
    print(json.dumps({"plugins": plugins, "definitions": seen, "answers": answers}))


if __name__ == "__main__":
    main()
