#!/usr/bin/env bash
# The main job: install, then show the mesh's control plane on a fresh demo home.
# Nothing outside this machine is needed; the demo home is removed afterwards unless
# HERMES_DEMO_KEEP=1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
hermes="$root/.venv/bin/hermes"

demo="$(mktemp -d "${TMPDIR:-/tmp}/hermes-demo.XXXXXX")"
if [ "${HERMES_DEMO_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$demo"' EXIT
fi
export HERMES_HOME="$demo/home"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step hermes --version
"$hermes" --version
step hermes profile create coder
"$hermes" profile create coder
step hermes profile create writer
"$hermes" profile create writer
step hermes -p coder profile list
"$hermes" -p coder profile list
step hermes -p writer profile show
"$hermes" -p writer profile show
step hermes doctor
"$hermes" doctor
