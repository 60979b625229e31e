"""The Hermes runtime package's contract: what its ``runtime.toml`` and ``operator.toml`` must
say, and how the operator plugin is rendered from it. No I/O: the caller passes the package's
verified files as ``{path: bytes}``.

The package holds exactly ``runtime.toml``, the detection manifest it names, ``operator.toml``
and the operator payload under ``operator/``. ``operator.toml`` closes the payload: every file
under ``operator/`` is listed once with its sha256, and nothing else is there (not even a
``.pyc``). The payload has one placeholder, in one named file, that the installer replaces with
the policy's absolute path. Any break of the contract is ``hermes_invalid_asset``; a message
names the rule, never a file's bytes.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime_package.package_errors import RuntimePackageError
from shared.operator import version_probe

PACKAGE_ID = "pohunek.runtime.hermes"
RUNTIME_ID = "hermes"
RUNTIME_MANIFEST = "runtime.toml"
OPERATOR_MANIFEST = "operator.toml"
OPERATOR_ROOT = "operator/"
PLUGIN = "pohunek"
TOKEN = "__POHUNEK_" + "POLICY_PATH__"  # split so this module holds no placeholder itself
PLACEHOLDER_FILE = f"{OPERATOR_ROOT}{PLUGIN}/__init__.py"
SCHEMA = 1
_HEADER = (
    "# The closed allowlist of the operator payload: every file under operator/, once, with its\n"
    "# sha256. Written by scripts/build_runtime_package.py --refresh-operator-manifest; the\n"
    "# installer refuses a package whose payload differs from it.\n"
)


class InvalidAsset(RuntimePackageError):
    code = "hermes_invalid_asset"


@dataclass(frozen=True)
class VersionRange:
    parser: str
    args: tuple[str, ...]
    min: version_probe.Version
    below: version_probe.Version


# The probe when no usable package names one: this core's own launch-gate grammar and range.
DEFAULT_PROBE = VersionRange(version_probe.PARSER, ("--version",), version_probe.MIN, version_probe.BELOW)


@dataclass(frozen=True)
class RuntimeManifest:
    package_id: str
    version: str
    runtime_id: str
    detect_manifest: str
    probe: VersionRange


@dataclass(frozen=True)
class OperatorManifest:
    plugin: str
    files: dict[str, str]  # package path -> sha256 hex


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _invalid(message: str, rule: str) -> InvalidAsset:
    return InvalidAsset(message, detail={"rule": rule})


def _toml(files: Mapping[str, bytes], path: str) -> dict[str, Any]:
    if path not in files:
        raise _invalid(f"the package has no {path}", "manifest_missing")
    try:
        return tomllib.loads(files[path].decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        raise _invalid(f"{path} is not UTF-8 TOML", "manifest_unreadable") from None


def _version(text: Any) -> version_probe.Version:
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 3 or not all(p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts):
        raise _invalid("the version probe's range is not X.Y.Z", "runtime_manifest")
    major, minor, patch = (int(p) for p in parts)
    return (major, minor, patch)


def runtime_manifest(files: Mapping[str, bytes]) -> RuntimeManifest:
    """What ``runtime.toml`` says, when it describes the Hermes runtime this core installs."""
    data = _toml(files, RUNTIME_MANIFEST)
    try:
        runtime, probe, integration = data["runtime"], data["runtime"]["version_probe"], data["integration"]
        identity = (data["schema"], data["runtime_api"], data["id"], runtime["id"], runtime["program"])
        detect, version = runtime["detect_manifest"], data["version"]
        parser, args = probe["parser"], probe["args"]
        low, high = _version(probe["min"]), _version(probe["below"])
        operator_manifest_name = integration["operator_manifest"]
    except (KeyError, TypeError):
        raise _invalid("runtime.toml lacks a field of the runtime contract", "runtime_manifest") from None
    if identity != (1, 1, PACKAGE_ID, RUNTIME_ID, "hermes"):
        raise _invalid("runtime.toml does not describe the official Hermes runtime", "runtime_manifest")
    if parser != version_probe.PARSER or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _invalid("runtime.toml's version probe is not one this core reads", "runtime_manifest")
    if not low < high or operator_manifest_name != OPERATOR_MANIFEST or not isinstance(version, str):
        raise _invalid("runtime.toml's version range or operator manifest is wrong", "runtime_manifest")
    if not isinstance(detect, str) or "/" in detect or detect not in files:
        raise _invalid("runtime.toml's detection manifest is not in the package", "runtime_manifest")
    return RuntimeManifest(PACKAGE_ID, version, RUNTIME_ID, detect, VersionRange(parser, tuple(args), low, high))


def operator_manifest(files: Mapping[str, bytes], runtime: RuntimeManifest) -> OperatorManifest:
    """``operator.toml``, checked against the payload: the closed allowlist, every digest, and
    the one placeholder in its one file."""
    data = _toml(files, OPERATOR_MANIFEST)
    expected_keys = {"schema", "plugin", "root", "policy_placeholder", "file"}
    placeholder = data.get("policy_placeholder")
    if set(data) != expected_keys or data["schema"] != SCHEMA or data["plugin"] != PLUGIN:
        raise _invalid("operator.toml is not the operator manifest this core reads", "operator_manifest")
    if data["root"] != OPERATOR_ROOT or placeholder != {"file": PLACEHOLDER_FILE, "token": TOKEN}:
        raise _invalid("operator.toml names another root or placeholder", "operator_manifest")
    listed: dict[str, str] = {}
    for entry in data["file"] if isinstance(data["file"], list) else [None]:
        if not isinstance(entry, dict) or set(entry) != {"path", "sha256"}:
            raise _invalid("an operator.toml file entry is malformed", "operator_manifest")
        path, digest = entry["path"], entry["sha256"]
        if not isinstance(path, str) or not path.startswith(f"{OPERATOR_ROOT}{PLUGIN}/") or path in listed:
            raise _invalid("operator.toml lists a path outside the payload, or twice", "operator_manifest")
        listed[path] = digest
    present = {path for path in files if path.startswith(OPERATOR_ROOT)}
    if present - set(listed):
        raise _invalid("the payload holds a file operator.toml does not list", "unlisted_file")
    if set(listed) - present:
        raise _invalid("operator.toml lists a file the payload lacks", "missing_file")
    if any(sha256_hex(files[path]) != digest for path, digest in listed.items()):
        raise _invalid("a payload file differs from its digest in operator.toml", "altered_file")
    others = set(files) - present - {RUNTIME_MANIFEST, OPERATOR_MANIFEST, runtime.detect_manifest}
    if others:
        raise _invalid("the package holds a file outside its contract", "unlisted_file")
    _check_placeholder(files, present)
    return OperatorManifest(PLUGIN, listed)


def _check_placeholder(files: Mapping[str, bytes], payload: set[str]) -> None:
    token = TOKEN.encode()
    counts = {path: files[path].count(token) for path in payload}
    if counts.get(PLACEHOLDER_FILE, 0) != 1 or sum(counts.values()) != 1:
        raise _invalid("the policy-path placeholder must appear exactly once, in its file", "placeholder")


def render(files: Mapping[str, bytes], manifest: OperatorManifest, policy_path: str) -> dict[str, bytes]:
    """The plugin's files, by path inside the plugin root, with the policy path written into the
    placeholder as a string literal; the rendered entry module must still compile."""
    prefix = f"{OPERATOR_ROOT}{manifest.plugin}/"
    rendered: dict[str, bytes] = {}
    for path in sorted(manifest.files):
        data = files[path]
        if path == PLACEHOLDER_FILE:
            data = data.replace(TOKEN.encode(), json.dumps(policy_path).encode())
            try:
                compile(data, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                raise _invalid("the rendered plugin does not compile", "placeholder") from None
        rendered[path.removeprefix(prefix)] = data
    return rendered


def operator_manifest_text(files: Mapping[str, bytes]) -> str:
    """The ``operator.toml`` that closes the payload among ``files`` (the package build writes it)."""
    import tomli_w  # only the build writes TOML

    payload = sorted(path for path in files if path.startswith(OPERATOR_ROOT))
    document = {
        "schema": SCHEMA,
        "plugin": PLUGIN,
        "root": OPERATOR_ROOT,
        "policy_placeholder": {"file": PLACEHOLDER_FILE, "token": TOKEN},
        "file": [{"path": path, "sha256": sha256_hex(files[path])} for path in payload],
    }
    return _HEADER + tomli_w.dumps(document)
