#!/usr/bin/env bash
# Install what the suite needs, check lint, format and types, then run the whole test suite.
# Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/container-setup.sh"
cd "$root"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
