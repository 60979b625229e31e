"""The agent profiles a host runs, and how each is launched, resumed and probed.

``hermes`` comes from its runtime descriptor, ``runtime-packages/hermes/runtime.toml`` (read
strictly: an unknown key or a missing one makes the runtime incompatible), with the
detection rules it names beside it. Before each launch
its ``version_probe`` runs ``hermes --version`` and the launch gate accepts exactly the
releases ``shared.operator.version_probe`` accepts. ``shell`` is a plain ``/bin/sh`` peer,
whose sessions can be forked.
"""

from __future__ import annotations

import os
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import trio

from shared.operator import version_probe
from shared.operator.protocol import Code, OperatorError
from shared.protocol import RemoteError

DESCRIPTOR = Path(__file__).resolve().parents[2] / "runtime-packages" / "hermes" / "runtime.toml"
PROBE_TIMEOUT = 10.0
PROBE_OUTPUT_CAP = 4096
TEXT_POLICIES = ("unrestricted", "hermes_safe_text")


class RuntimeIncompatible(OperatorError):
    code = Code.RUNTIME_INCOMPATIBLE


@dataclass(frozen=True)
class Agent:
    name: str
    base: str
    program: str
    launch_args: tuple[str, ...]
    resume_args: tuple[str, ...] | None  # with "{reference}" where the native reference goes
    fork_supported: bool
    submit: bytes
    probe_args: tuple[str, ...] | None = None
    bracketed_paste: bool = False  # the text goes in ESC[200~ … ESC[201~
    submit_delay: float = 0.0  # seconds between the text and its submit, written apart
    safe_text: bool = False  # only printable text, newlines and tabs may be typed

    def framed(self, text: str, submit: bool) -> tuple[bytes, bytes]:
        """What input ``text`` writes, as the daemon frames it for this agent: the text (in a
        bracketed paste when the agent takes one), and the submit to write ``submit_delay``
        later on its own (empty when the submit goes with the text, or there is none). An
        agent that takes safe text only refuses a control character: typed into a paste, an
        ESC could end it early and the rest would be keys."""
        if self.safe_text and any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in text):
            raise RemoteError(
                Code.SESSION_INPUT_REJECTED,
                "the input holds a control character other than a newline or a tab",
                detail={"field": "text"},
            )
        data = text.encode("utf-8")
        if self.bracketed_paste:
            data = b"\x1b[200~" + data + b"\x1b[201~"
        if not submit:
            return data, b""
        return (data, self.submit) if self.submit_delay else (data + self.submit, b"")

    def argv(self, reference: str | None = None) -> list[str]:
        if reference is None:
            return [self.program, *self.launch_args]
        if self.resume_args is None:
            raise RemoteError(Code.AGENT_NOT_RESUMABLE, f"{self.name} sessions cannot be resumed")
        return [self.program, *(arg.replace("{reference}", reference) for arg in self.resume_args)]

    def launch_identity(self) -> dict[str, str]:
        """What the launcher freezes for the PTY root: the script and the interpreter its shebang
        names. A program that is not a shebang script leaves no identity, so no native id claim
        from it is ever accepted."""
        interpreter = shebang_interpreter(self.program)
        if interpreter is None:
            return {}
        return {"POHUNEK_LAUNCH_EXE": os.path.realpath(interpreter), "POHUNEK_LAUNCH_SCRIPT": self.program}


SHELL_PROGRAM = "/bin/sh"


def shell() -> Agent:
    return Agent("shell", "shell", SHELL_PROGRAM, ("-i",), None, True, b"\n")


def hermes(program: str, descriptor: Path = DESCRIPTOR) -> tuple[Agent, str]:
    """The hermes agent as its descriptor says, running ``program`` (the descriptor names the
    program ``hermes``; which file that is, is this host's choice), and the name of its
    detection manifest beside it."""
    try:
        text = descriptor.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeIncompatible(f"the hermes runtime descriptor cannot be read: {type(exc).__name__}") from None
    return hermes_from(program, text)


def hermes_from(program: str, text: str) -> tuple[Agent, str]:
    """The hermes agent a descriptor's text describes (a package's verified ``runtime.toml``)."""
    try:
        data = tomllib.loads(text)
        _exactly(
            data,
            {
                "schema",
                "id",
                "version",
                "runtime_api",
                "runtime",
                "input",
                "resume",
                "fork",
                "native_reference",
                "integration",
            },
        )
        if (data["schema"], data["runtime_api"]) != (1, 1):
            raise RuntimeIncompatible("the runtime descriptor is of a schema this daemon does not read")
        runtime, resume, probe = data["runtime"], data["resume"], data["runtime"]["version_probe"]
        _exactly(runtime, {"id", "name", "program", "args", "detect_manifest", "version_probe"})
        _exactly(probe, {"parser", "args", "min", "below"})
        _exactly(data["input"], {"bracketed_paste", "submit", "submit_delay_ms", "text_policy"})
        framing = data["input"]
        if not isinstance(framing["bracketed_paste"], bool) or framing["submit_delay_ms"] not in range(1001):
            raise RuntimeIncompatible("the input framing must be a paste flag and a delay of 0 to 1000 ms")
        if framing["text_policy"] not in TEXT_POLICIES:
            raise RuntimeIncompatible(f"the input text policy must be one of {', '.join(TEXT_POLICIES)}")
        _exactly(resume, {"supported", "reference_kind", "args"})
        _exactly(data["fork"], {"supported"})
        _exactly(data["native_reference"], {"strategy"})
        if runtime["program"] != "hermes" or data["native_reference"]["strategy"] != "reported":
            raise RuntimeIncompatible("the runtime descriptor does not describe a Hermes managed terminal")
        if probe["parser"] != version_probe.PARSER or [probe["min"], probe["below"]] != [
            version_probe.dotted(version_probe.MIN),
            version_probe.dotted(version_probe.BELOW),
        ]:
            raise RuntimeIncompatible("the runtime's version probe is not the one this daemon speaks")
        resume_args = _strings(resume["args"]) if resume["supported"] is True else None
        if resume_args is not None and sum(arg.count("{reference}") for arg in resume_args) != 1:
            raise RuntimeIncompatible("the resume arguments must hold the reference exactly once")
        agent = Agent(
            runtime["id"],
            "hermes",
            program,
            tuple(_strings(runtime["args"])),
            tuple(resume_args) if resume_args is not None else None,
            data["fork"]["supported"] is True,
            str(data["input"]["submit"]).encode(),
            tuple(_strings(probe["args"])),
            framing["bracketed_paste"],
            framing["submit_delay_ms"] / 1000,
            framing["text_policy"] == "hermes_safe_text",
        )
        manifest = runtime["detect_manifest"]
        if not isinstance(manifest, str) or Path(manifest).name != manifest or not manifest.endswith(".toml"):
            raise RuntimeIncompatible("the detection manifest must be a .toml file beside the descriptor")
        return agent, manifest
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise RuntimeIncompatible(f"the hermes runtime descriptor cannot be read: {type(exc).__name__}") from None


def _exactly(table: object, keys: set[str]) -> None:
    if not isinstance(table, dict) or set(table) != keys:
        raise RuntimeIncompatible(f"a runtime descriptor table must hold exactly {sorted(keys)}")


def _strings(values: object) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise RuntimeIncompatible("runtime arguments must be a list of strings")
    return values


def shebang_interpreter(program: str) -> str | None:
    try:
        with open(program, "rb") as script:
            first = script.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].strip().split()
    return os.fsdecode(words[0]) if words else None


async def probe(agent: Agent) -> tuple[int, int, int] | None:
    """The launch gate: the version the agent reports, refused outside the supported window."""
    if agent.probe_args is None:
        return None
    with trio.move_on_after(PROBE_TIMEOUT):
        try:
            done = await trio.run_process(
                [agent.program, *agent.probe_args], capture_stdout=True, capture_stderr=True, check=False
            )
        except OSError as exc:
            raise RemoteError(
                Code.AGENT_RUNTIME_UNSUPPORTED,
                f"{agent.name} cannot be run: {exc.strerror}",
                detail={"agent": agent.name, "reason": "not_runnable"},
            ) from None
        text = done.stdout[:PROBE_OUTPUT_CAP].decode("utf-8", "replace")
        try:
            return version_probe.check(text)
        except version_probe.VersionProbeError as exc:
            raise RemoteError(
                Code.AGENT_RUNTIME_UNSUPPORTED, exc.message, detail={"agent": agent.name, **(exc.detail or {})}
            ) from None
    raise RemoteError(
        Code.AGENT_RUNTIME_UNSUPPORTED,
        f"{agent.name} --version did not answer within {PROBE_TIMEOUT:g}s",
        detail={"agent": agent.name, "reason": "probe_timeout"},
    )
