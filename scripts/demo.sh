#!/usr/bin/env bash
# The main job: install, then run the mesh on a fresh demo home (three profiles, one gateway
# each under the embedded supervisord), send each gateway a turn and show the gateway table.
# Nothing outside this machine is needed; everything the demo starts is stopped again.
# Extra arguments go to `hermes demo` (--keep, --json, --home DIR).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/hermes" demo "$@"
