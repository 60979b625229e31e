#!/usr/bin/env bash
# Create .venv/ in the repo root and install hermes-mesh with its test extras.
# Re-running is cheap: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "hermes-mesh needs Python 3.11 or newer (found: $("$python" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=.venv/.hermes-mesh-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # compat mode puts the checkout itself on sys.path: the code that runs is the tree on disk,
    # which is what an in-place update swaps.
    .venv/bin/python -m pip install --quiet -e '.[test]' --config-settings editable_mode=compat
    echo "$want" > "$stamp"
fi
# The tree's code compiled as an update compiles it, so that no process of this install compiles
# its imports itself (cheap when nothing changed: a file whose bytecode matches it is skipped).
.venv/bin/python -m services.updater.bytecode
