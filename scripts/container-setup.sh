#!/usr/bin/env bash
# Install what the container tier (tests/containers) needs: podman, runc, catatonit, debootstrap
# and docker-compose from apt, and podman-compose (not in Debian 12 at a version that works) from
# PyPI into .venv-containers. Where the tier cannot run (not root, no apt) it says so and exits 0:
# the tier then skips. A failed install fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "container tier: not installed here (needs root and apt-get); it will be skipped" >&2
    exit 0
fi
missing=()
for tool in podman runc catatonit debootstrap docker-compose; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "container tier: installing ${missing[*]} with apt" >&2
    timeout 300 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
        podman runc catatonit debootstrap docker-compose >/dev/null
fi
want=1.6.0
if [ "$(.venv-containers/bin/podman-compose version 2>/dev/null | awk '/podman-compose version/{print $3}')" != "$want" ]; then
    echo "container tier: installing podman-compose $want" >&2
    python3 -m venv .venv-containers
    .venv-containers/bin/python -m pip install --quiet "podman-compose==$want"
fi
