#!/usr/bin/env bash
# Install what the suite needs, check lint, format, types and the testing page's counts, then run
# the whole test suite in parallel workers. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/container-setup.sh"
cd "$root"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy
.venv/bin/python scripts/tier_counts.py --check
# Compiled once and checked against each source's hash when imported, so no compiled file is
# ever stale: every process a test starts from this checkout skips compiling it, whether or not
# the environment lets Python write bytecode. The operator payload is left out: it ships as source.
packages="$(.venv/bin/python -c 'from tests.support.processes import PACKAGES; print(" ".join(PACKAGES))')"
# shellcheck disable=SC2086  # one word per package
.venv/bin/python -m compileall -q -j 0 --invalidation-mode checked-hash $packages tests scripts bench >/dev/null
# Many tests wait on child processes, so more workers than cores keep the cores busy.
exec .venv/bin/python -m pytest -n "${HERMES_TEST_WORKERS:-4}" "$@"
