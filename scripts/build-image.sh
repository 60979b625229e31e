#!/usr/bin/env bash
# Build the hermes-mesh image from the committed code (HEAD), with docker or podman.
#
#   bash scripts/build-image.sh [--engine docker|podman] [--tag TAG] [--base IMAGE | --debootstrap]
#
# --base IMAGE    a Python 3.11 image to build on (default: python:3.11-slim-bookworm, pulled by the engine)
# --debootstrap   make the base here from Debian's packages (debootstrap minbase, imported), for machines
#                 that can pull nothing; the same packages give the same base, byte for byte. The base
#                 is made once per key of what makes it (suite, variant, packages, mirror, debootstrap's
#                 version, the cleanup) and reused while an image with that key is in the engine's storage.
#                 HERMES_BASE_INCLUDE replaces its package list (python3,python3-venv,ca-certificates)
# --print-base-key  print that key and exit
# Only committed code goes in (git archive HEAD): a dirty tree builds what HEAD holds. The build
# itself runs with no network (the wheels are made first), and podman's --timestamp 0 makes two
# builds of one commit the same image. Prints the image id on stdout; progress goes to stderr.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
engine="" tag="localhost/hermes-mesh:dev" base="python:3.11-slim-bookworm" debootstrap=0 print_key=0
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine="${2:?--engine needs docker or podman}"; shift 2 ;;
        --tag) tag="${2:?--tag needs a name}"; shift 2 ;;
        --base) base="${2:?--base needs an image}"; shift 2 ;;
        --debootstrap) debootstrap=1; shift ;;
        --print-base-key) print_key=1; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-image: unknown argument: $1" >&2; exit 2 ;;
    esac
done

# Everything that makes the debootstrap base, and so its key: a change of any makes a new base.
suite=bookworm variant=minbase
include="${HERMES_BASE_INCLUDE:-python3,python3-venv,ca-certificates}"
mirror="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
# What differs between two runs of the same packages: caches, logs and the docs nobody reads here.
cleanup="var/cache/apt/archives/*.deb var/lib/apt/lists/* usr/share/doc/* usr/share/man/* usr/share/locale/*
 var/log/*.log var/cache/debconf/*-old var/cache/ldconfig/aux-cache"
tar_options="--sort=name --mtime=@0 --numeric-owner --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"
base_containerfile='FROM scratch\nADD base.tar /\nCMD ["/bin/bash"]\n'
key_label=org.hermes-mesh.base-key
base_key() {
    command -v debootstrap >/dev/null || { echo "build-image: --debootstrap needs debootstrap" >&2; exit 2; }
    printf '%s\n' "suite $suite" "variant $variant" "include $include" "mirror $mirror" \
        "debootstrap $(debootstrap --version)" "cleanup $cleanup" "tar $tar_options" "containerfile $base_containerfile" |
        sha256sum | cut -d' ' -f1
}
if [ "$print_key" = 1 ]; then
    base_key
    exit 0
fi
if [ -z "$engine" ]; then
    engine="$(command -v podman >/dev/null && echo podman || echo docker)"
fi
case "$engine" in docker|podman) ;; *) echo "build-image: --engine is docker or podman" >&2; exit 2 ;; esac
command -v "$engine" >/dev/null || { echo "build-image: $engine is not installed" >&2; exit 2; }
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say() { echo "build-image: $*" >&2; }

revision="$(git -C "$root" rev-parse HEAD)"
mkdir -p "$work/src" "$work/ctx"
git -C "$root" archive HEAD | tar -x -C "$work/src"
say "wheels of $revision and its dependencies"
# The commit's own time in the project wheel's zip entries, so every build makes the same wheel.
SOURCE_DATE_EPOCH="$(git -C "$root" log -1 --format=%ct HEAD)" \
    "$python" -m pip wheel --quiet --wheel-dir "$work/ctx/wheels" "$work/src" >&2
cp "$root/compose/Containerfile" "$work/ctx/Containerfile"

if [ "$debootstrap" = 1 ]; then
    key="$(base_key)"
    base="localhost/hermes-base:$suite"
    keyed="localhost/hermes-base:$suite-${key:0:16}"  # the base of this key, whichever $base names now
    if [ "$("$engine" image inspect --format "{{index .Config.Labels \"$key_label\"}}" "$keyed" 2>/dev/null)" = "$key" ]
    then
        say "reusing the base $keyed: nothing that makes it changed"
        "$engine" tag "$keyed" "$base"
    else
        say "a Debian $suite base with debootstrap ($mirror)"
        debootstrap --variant="$variant" --include="$include" "$suite" "$work/rootfs" "$mirror" >&2
        # shellcheck disable=SC2086  # the patterns are globbed inside the rootfs
        ( cd "$work/rootfs" && rm -rf $cleanup )
        # shellcheck disable=SC2086
        tar -C "$work/rootfs" $tar_options -cf "$work/base.tar" .
        # Built, not imported: an import stamps the image with the time, a build here with epoch 0.
        mkdir "$work/base" && mv "$work/base.tar" "$work/base/"
        printf "$base_containerfile" > "$work/base/Containerfile"
        if [ "$engine" = podman ]; then
            podman build --quiet --network none --timestamp 0 --label "$key_label=$key" -t "$keyed" -t "$base" \
                "$work/base" >/dev/null
        else
            SOURCE_DATE_EPOCH=0 docker build --quiet --network none --label "$key_label=$key" -t "$keyed" -t "$base" \
                "$work/base" >/dev/null
        fi
    fi
fi

pull=missing
[ "$debootstrap" = 1 ] && pull=never  # the base was just imported: nothing to fetch
say "the image $tag on $base"
if [ "$engine" = podman ]; then
    podman build --quiet --pull="$pull" --network none --timestamp 0 \
        --build-arg BASE="$base" --build-arg REVISION="$revision" \
        --label org.opencontainers.image.revision="$revision" -t "$tag" "$work/ctx" >/dev/null
else
    SOURCE_DATE_EPOCH=0 docker build --quiet --network none \
        --build-arg BASE="$base" --build-arg REVISION="$revision" \
        --label org.opencontainers.image.revision="$revision" -t "$tag" "$work/ctx" >/dev/null
fi
"$engine" image inspect --format '{{.Id}}' "$tag"
