"""scripts/sign_catalog.py as a real process: keygen, sign, and the catalog it writes verifies."""

from __future__ import annotations

import hashlib
import stat
import subprocess
import sys
import time
from pathlib import Path

from runtime_package.catalog import host_platform, parse_anchor, verify
from tests.support.processes import ROOT, python_env

SCRIPT = ROOT / "scripts" / "sign_catalog.py"
TIMEOUT = 60


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=cwd,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_keygen_then_sign_writes_a_catalog_the_verifier_accepts(tmp_path):
    archive = tmp_path / "hermes.tar.zst"
    archive.write_bytes(b"archive bytes")
    made = run("keygen", "--out", "signing.key", "--anchor", "anchor.json", "--valid-days", "2", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    key_text = (tmp_path / "signing.key").read_text()
    assert stat.S_IMODE((tmp_path / "signing.key").stat().st_mode) == 0o600

    signed = run(
        "sign", "--key", "signing.key", "--sequence", "7",
        "--entry", f"{archive}:pohunek.runtime.hermes:hermes:1.0.0", "-o", "catalog.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    assert key_text.strip() not in made.stdout + made.stderr + signed.stdout + signed.stderr

    anchor = parse_anchor((tmp_path / "anchor.json").read_bytes())
    catalog = verify((tmp_path / "catalog.json").read_bytes(), anchor, now=int(time.time()), high_water=7)
    digest = "sha256:" + hashlib.sha256(b"archive bytes").hexdigest()
    found = catalog.authorize(
        "pohunek.runtime.hermes", "hermes", digest, platform=host_platform(), core_version="0.1.0"
    )
    assert (catalog.sequence, found.version, found.core) == (7, "1.0.0", ">=0.1.0, <1.0.0")


def test_failures_are_one_line_and_exit_2(tmp_path):
    assert run("keygen", "--out", "k", cwd=tmp_path).returncode == 0
    (tmp_path / "a").write_bytes(b"x")
    cases = [
        ("keygen", "--out", "k"),  # a key is never overwritten
        ("sign", "--key", "k", "--sequence", "1e3", "--entry", "a:p:hermes:1", "-o", "c"),
        ("sign", "--key", "k", "--sequence", "1", "--entry", "missing:p:hermes:1", "-o", "c"),
        ("sign", "--key", "k", "--sequence", "1", "--entry", "a:p:shell:1", "-o", "c"),
        ("sign", "--key", "k", "--sequence", "1", "--entry", "a:p:hermes:1", "--core", "^1", "-o", "c"),
        ("sign", "--key", "nokey", "--sequence", "1", "--entry", "a:p:hermes:1", "-o", "c"),
        ("frobnicate",),
    ]
    for argv in cases:
        done = run(*argv, cwd=tmp_path)
        assert done.returncode == 2, argv
        assert done.stderr.startswith("sign_catalog: ") and done.stderr.count("\n") == 1, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "c").exists()


def test_a_key_readable_by_others_is_refused(tmp_path):
    assert run("keygen", "--out", "k", cwd=tmp_path).returncode == 0
    (tmp_path / "k").chmod(0o644)
    (tmp_path / "a").write_bytes(b"x")
    done = run("sign", "--key", "k", "--sequence", "1", "--entry", "a:p:hermes:1", "-o", "c", cwd=tmp_path)
    assert (done.returncode, "readable by others" in done.stderr) == (2, True)
