"""Skins as a user writes them, the colour a skin's painter puts on a terminal, and the real
Hermes Agent's built-in skins as files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.real_hermes import isolated_env


def write_skin(home, name, text):
    (home / "skins").mkdir(exist_ok=True)
    path = home / "skins" / f"{name}.yaml"
    path.write_text(text)
    return path


def escape(color: str) -> str:
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"\033[38;2;{red};{green};{blue}m"


# Run by the real Hermes Agent's own interpreter: its built-in skins, each as the YAML text of
# a user skin file (``<home>/skins/<name>.yaml``), the form its own loader reads back.
REAL_BUILTINS_AS_FILES = """
import json, yaml
from hermes_cli.skin_engine import _BUILTIN_SKINS
print(json.dumps({
    name: yaml.safe_dump(skin, allow_unicode=True, sort_keys=False, width=1 << 16)
    for name, skin in _BUILTIN_SKINS.items()
}))
"""

REAL_SKINS = Path(__file__).parent / "fixtures" / "real_hermes_skins"


def real_builtins_as_files(real) -> dict[str, str]:
    """The real Hermes Agent's built-in skins, as it would read them from user skin files."""
    done = subprocess.run(
        [str(real.python), "-I", "-c", REAL_BUILTINS_AS_FILES],  # -I: its own package, never this checkout's
        env=isolated_env(Path("/nonexistent"), Path("/nonexistent/.hermes")),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)
