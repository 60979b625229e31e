"""What the plugin must know of the operator daemon's protocol and the policy's rules, copied
here so that it runs inside a Hermes without this project's packages.

Each value is a copy of the one its source of truth defines (``shared.operator.protocol``,
``shared.operator.policy``, ``shared.operator.policy_file``, ``shared.operator.u64``,
``shared.protocol``, ``shared.hook_vocabulary``, ``shared.exit_codes``); the test suite
asserts every copy equals its source, so a rule still lives in one place and drift fails the
suite. Standard library only.
"""

from __future__ import annotations

# shared.operator.protocol
SESSION_ENV = "POHUNEK_SESSION_ID"
DAEMON_ID_ENV = "POHUNEK_DAEMON_ID"
STATES = ("starting", "running", "stopped", "done", "failed")
ACTIVITIES = ("working", "blocked", "idle")
WAIT_MAX_MS = 8000
OUTPUT_MAX_BYTES = 783_240
INPUT_MAX_BYTES = 65_536
MAX_COLS = 500
MAX_ROWS = 200
ORIGIN_DENIED = frozenset({"stop", "resume", "remove", "fork", "resize", "set_metadata", "rename", "input"})

# The daemon's codes the plugin names (shared.operator.protocol.Code).
SESSION_NOT_LIVE = "session_not_live"
SESSION_AMBIGUOUS = "session_ambiguous"
PROJECT_NOT_FOUND = "project_not_found"
PROJECT_AMBIGUOUS = "project_ambiguous"
AGENT_UNKNOWN = "agent_unknown"
AGENT_FORK_UNSUPPORTED = "agent_fork_unsupported"

# The transport's codes the plugin names (shared.protocol.Code).
PROTOCOL_INCOMPATIBLE = "protocol_incompatible"
MALFORMED_REPLY = "malformed_reply"
UNAVAILABLE = "unavailable"
CONNECTION_RESET = "connection_reset"
SHUTTING_DOWN = "shutting_down"
TIMEOUT = "timeout"
DEADLINE_EXCEEDED = "deadline_exceeded"
INVALID_FIELD = "invalid_field"
MISSING_FIELD = "missing_field"
UNKNOWN_FIELD = "unknown_field"

# The ops the tools send, by name (shared.operator.protocol).
HOST_INSPECT = "host.inspect"
PROJECT_LIST = "project.list"
SESSION_LIST = "session.list"
SESSION_GET = "session.get"
SESSION_SCREEN = "session.screen"
SESSION_OUTPUT = "session.output"
SESSION_WAIT = "session.wait"
SESSION_DIFF = "session.diff"
SESSION_NEW = "session.new"
SESSION_INPUT = "session.input"
SESSION_RESUME = "session.resume"
SESSION_FORK = "session.fork"
SESSION_RESIZE = "session.resize"
SESSION_RENAME = "session.rename"
SESSION_SET_METADATA = "session.set_metadata"
SESSION_STOP = "session.stop"
SESSION_REMOVE = "session.remove"
# What a wait or an output read may take beyond its own timeout (their specs' timeout).
SESSION_OUTPUT_TIMEOUT = 15.0
SESSION_WAIT_TIMEOUT = 15.0

# shared.exit_codes: the operator CLI's call answered, refused by the daemon or the transport,
# malformed, or its policy unusable.
CALL_EXIT_CODES = frozenset({0, 1, 2, 3})

# shared.operator.policy and shared.operator.policy_file
READ_TOOLS = (
    "pohunek_hosts",
    "pohunek_sessions",
    "pohunek_session_get",
    "pohunek_session_screen",
    "pohunek_session_output",
    "pohunek_session_wait",
    "pohunek_session_diff",
)
MANAGE_TOOLS = READ_TOOLS + (
    "pohunek_session_start",
    "pohunek_session_send",
    "pohunek_session_resume",
    "pohunek_session_fork",
    "pohunek_session_resize",
    "pohunek_session_rename",
    "pohunek_session_set_metadata",
)
FULL_TOOLS = MANAGE_TOOLS + ("pohunek_session_stop", "pohunek_session_remove")
MAX_OUTPUT_BYTES = 1_048_576
MAX_POLICY_BYTES = 64 * 1024
OPEN_TO_OTHERS = 0o077

# shared.operator.u64
U64_MAX = 2**64 - 1

# shared.hook_vocabulary
HOOK_VERSION = 1
MAX_REPORT_BYTES = 1024
ID_PATTERN = r"[A-Za-z0-9._:-]{1,128}"
ACTIVITY_STATES = frozenset({"working", "idle"})
ATTENTION_REASONS = frozenset({"owner_approval"})
RELEASE_REASONS = frozenset({"session_end", "agent_exit", "handoff"})

# shared.hooks
HOOK_ENDPOINT_ENV = "POHUNEK_HOOK_ENDPOINT"
LAUNCH_EXE_ENV = "POHUNEK_LAUNCH_EXE"
LAUNCH_SCRIPT_ENV = "POHUNEK_LAUNCH_SCRIPT"
PTY_ROOT_PID_ENV = "POHUNEK_PTY_ROOT_PID"
HOOK_COUNTERS = ("sent", "unmanaged", "refused", "not_accepted", "error")
MAX_CONTINUATION_IDS = 16
