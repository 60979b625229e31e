"""The debootstrap base of ``scripts/build-image.sh`` is made once per key of what makes it: a
build after the tier's first reuses it (and gives the same image), and a change of what makes it
(here the package list) is a new key."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.containers.conftest import IMAGE
from tests.support.processes import ROOT

pytestmark = pytest.mark.containers

BASE = "localhost/hermes-base:bookworm"
KEY_LABEL = "org.hermes-mesh.base-key"


def _key(**env: str) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh"), "--print-base-key"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_second_build_reuses_the_base_and_gives_the_same_image(sandbox, image):
    first = sandbox.inspect(image)["Id"]
    base = sandbox.inspect(BASE)
    assert base["Config"]["Labels"][KEY_LABEL] == _key()
    started = time.monotonic()
    again = sandbox.build(ROOT, IMAGE)
    print(f"second build: {time.monotonic() - started:.1f} s")
    assert "reusing the base" in again.stderr and "debootstrap (" not in again.stderr, again.stderr
    assert again.stdout.strip().splitlines()[-1] == first
    assert sandbox.inspect(BASE)["Id"] == base["Id"]


def test_a_changed_package_list_is_a_new_key(sandbox):
    default = _key()
    assert _key() == default  # the same inputs, the same key
    assert _key(HERMES_BASE_INCLUDE="python3,python3-venv") != default
    assert _key(HERMES_BASE_INCLUDE="python3,python3-venv,ca-certificates") == default
