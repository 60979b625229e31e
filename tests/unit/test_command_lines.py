"""The canonical argv matchers built on the CLI grammar (``fleet.command_lines``)."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import cli_grammar
from fleet.command_lines import (
    gateway_served_profiles,
    holder_subcommand,
    looks_like_gateway_command_line,
    looks_like_gateway_runtime_command_line,
    value_flags,
)
from shared import homes

# --- argv matchers ---------------------------------------------------------------------------

# How a launcher may start Hermes through runpy (its argv is the list literal).
BOOT = (
    "import sys, runpy; sys.argv = ['/x/hermes_cli/main.py','gateway','run']; "
    "runpy.run_module('hermes_cli.main', run_name='__main__')"
)


def boot(old: str = "", new: str = "", *, tail: str = "") -> str:
    """``python3 -c BOOTSTRAP`` with ``old`` replaced by ``new`` in it, and ``tail`` after it."""
    program = BOOT.replace(old, new) if old else BOOT
    return f'python3 -c "{program}{tail}"'


# (command line, holder_subcommand, gateway run, gateway runtime)
CASES = [
    # executable entry, gateway actions
    ("hermes gateway run", "gateway", True, True),
    ("/usr/local/bin/hermes gateway run", "gateway", True, True),
    ("./hermes gateway", "gateway", True, True),
    ("hermes gateway restart", "gateway", False, True),
    ("hermes gateway status", "gateway", False, False),
    ("hermes gateway start", "gateway", False, False),
    ("hermes gateway stop", "gateway", False, False),
    ("hermes gateway install", "gateway", False, False),
    # profile selectors, before and after the subcommand
    ("hermes --profile coder gateway run", "gateway", True, True),
    ("hermes -p coder gateway run", "gateway", True, True),
    ("hermes --profile=coder gateway run", "gateway", True, True),
    ("hermes -p=coder gateway run", "gateway", True, True),
    ("hermes -pcoder gateway restart", "gateway", False, True),
    ("hermes gateway --profile coder run", "gateway", True, True),
    ("hermes gateway -p coder", "gateway", True, True),
    ("hermes gateway run -p coder", "gateway", True, True),
    ("hermes gateway -pcoder status", "gateway", False, False),
    ("hermes -p gateway status", "status", False, False),
    ("hermes --profile gateway doctor", "doctor", False, False),
    ("hermes --profile=gateway status", "status", False, False),
    ("hermes -p gateway gateway restart", "gateway", False, True),
    ("hermes gateway -p restart run", "gateway", True, True),
    ("hermes gateway -p run status", "gateway", False, False),
    # parser-derived value flags
    ("hermes -m dashboard serve", "serve", False, False),
    ("hermes --model dashboard serve", "serve", False, False),
    ("hermes -m gateway status", "status", False, False),
    ("hermes --model=x gateway", "gateway", True, True),
    ("hermes -mx gateway", "gateway", True, True),
    ("hermes -mgateway status", "status", False, False),
    ("hermes kanban --preserve-cache", "kanban", False, False),
    ("hermes --unknown gateway run", "gateway", True, True),
    ("hermes gateway --verbose run", "gateway", True, True),
    ("hermes -- gateway run", "gateway", True, True),
    ("hermes gateway -- restart", "gateway", False, True),
    ("hermes doctor --json", "doctor", False, False),
    ("hermes profile list", "profile", False, False),
    ("hermes", None, False, False),
    ("hermes --version", None, False, False),
    ("hermes -p coder", None, False, False),
    ("hermes -m", None, False, False),
    # the Hermes Agent CLI's chat flags before the command
    ("hermes --reasoning high serve", "serve", False, False),
    ("hermes --reasoning=high gateway run", "gateway", True, True),
    ("hermes -t browser,files gateway run", "gateway", True, True),
    ("hermes --toolsets web gateway", "gateway", True, True),
    ("hermes -tweb gateway status", "gateway", False, False),
    ("hermes -t gateway status", "status", False, False),
    ("hermes -p work --resume X chat", "chat", False, False),
    ("hermes chat --resume X", "chat", False, False),
    ("hermes -c gateway run", "gateway", True, True),
    ("hermes --resume gateway status", "status", False, False),
    # a chat to go back to, and no command: chat
    ("hermes --resume 20261201_185301_ab12cd", "chat", False, False),
    ("hermes --resume=X", "chat", False, False),
    ("hermes -r X", "chat", False, False),
    ("hermes -rX", "chat", False, False),
    ("hermes --resume gateway", "chat", False, False),
    ("hermes -c", "chat", False, False),
    ("hermes --continue", "chat", False, False),
    ("hermes -p work -c", "chat", False, False),
    ("hermes -c -p work", "chat", False, False),
    ("hermes -p -c", None, False, False),  # "-c" is the profile's name here
    ("hermes --reasoning high", None, False, False),
    ("hermes -t web --reasoning low", None, False, False),
    ("python3 -m hermes_cli.main --resume X", "chat", False, False),
    # interpreter entries
    ("python -m hermes_cli.main gateway run", "gateway", True, True),
    ("python3.13t -m hermes_cli.main gateway run", "gateway", True, True),  # free-threaded builds
    ("python3.14t -u -m hermes_cli.main gateway run", "gateway", True, True),
    ("/usr/bin/python3.13t -m services.gateway --profile coder", "gateway", True, True),
    ("/usr/local/bin/python3t /usr/local/bin/hermes gateway run", "gateway", True, True),
    (r"C:\Python313\python3.13t.exe -m hermes_cli.main gateway run", "gateway", True, True),
    (r"C:\Python313\pythonw3.13t.exe -m hermes_cli.main gateway restart", "gateway", False, True),
    ("python3.11 -u -m hermes_cli.main gateway run", "gateway", True, True),
    ("python3 -X utf8 -m hermes_cli.main gateway run", "gateway", True, True),
    ("python3 -W ignore -m hermes_cli.main gateway run", "gateway", True, True),
    ("python3 -Wignore -m hermes_cli.main -p gateway status", "status", False, False),
    ("python3 -I -m hermes_cli.main gateway restart", "gateway", False, True),
    ("python3 -Im hermes_cli.main gateway run", "gateway", True, True),
    ("python3 -mhermes_cli.main gateway run", "gateway", True, True),
    ("pythonw -m hermes_cli.main gateway run", "gateway", True, True),
    ("/opt/hermes/.venv/bin/python -m hermes_cli.main --profile coder gateway run", "gateway", True, True),
    ("python3 /srv/hermes/hermes_cli/main.py gateway run", "gateway", True, True),
    ("python3 hermes_cli/main.py gateway restart", "gateway", False, True),
    ("/usr/bin/python3 /usr/local/bin/hermes gateway run", "gateway", True, True),
    ("/usr/bin/python3 -- /usr/local/bin/hermes gateway run", "gateway", True, True),
    ("python3 --check-hash-based-pycs never /usr/local/bin/hermes gateway run", "gateway", True, True),
    ("python3 -X utf8 /usr/local/bin/hermes -p coder gateway", "gateway", True, True),
    ("/usr/bin/python3 /usr/local/bin/hermes -m dashboard serve", "serve", False, False),
    # Windows shapes
    (r'"C:\Program Files\Hermes\hermes.exe" gateway run', "gateway", True, True),
    (r"C:\hermes\hermes.exe gateway run", "gateway", True, True),
    (r"C:\hermes\hermes.exe -p gateway status", "status", False, False),
    ("HERMES.EXE gateway run", "gateway", True, True),
    ("Hermes.Exe -p gateway gateway status", "gateway", False, False),
    (r'"C:\Program Files\Python311\python.exe" -m hermes_cli.main gateway run', "gateway", True, True),
    (r"C:\Python311\PYTHON.EXE C:\src\hermes\hermes_cli\main.py gateway run", "gateway", True, True),
    (r"C:\Python311\python.exe -X utf8 C:\hermes\Scripts\hermes.exe gateway restart", "gateway", False, True),
    (r'"C:\Program Files\Hermes\hermes-gateway.exe"', "gateway", True, True),
    (r"C:\x\pythonw.exe C:\x\gateway\run.py", "gateway", True, True),
    ("'/opt/my hermes/bin/hermes' 'gateway' 'run'", "gateway", True, True),
    # the runpy bootstrap: its list literal is the argv
    (f'python -I -c "{BOOT}"', "gateway", True, True),
    (f'/usr/bin/python3 -Ic "{BOOT}"', "gateway", True, True),
    (boot() + " ignored words", "gateway", True, True),
    (boot("run']", "restart']"), "gateway", False, True),
    (boot("'gateway','run'", "'-p','work','--resume','X','chat'"), "chat", False, False),
    (boot("run_name=", "alter_sys=True, run_name="), "gateway", True, True),
    (boot("'hermes_cli.main'", "'services.gateway'"), "gateway", True, True),
    (boot("import sys, runpy", "import runpy; import sys"), "gateway", True, True),
    # gateway-dedicated entries
    ("python -m services.gateway --profile coder", "gateway", True, True),
    ("python3 -m services.gateway", "gateway", True, True),
    ("python3 /opt/x/gateway/run.py", "gateway", True, True),
    ("/opt/x/gateway/run.py --profile coder", "gateway", True, True),
    ("hermes-gateway", "gateway", True, True),
    ("/usr/bin/hermes-gateway --profile x", "gateway", True, True),
    ("HERMES-GATEWAY.EXE", "gateway", True, True),
    # not Hermes
    ("hermes-gatewayd", None, False, False),
    ("hermes.real gateway run", None, False, False),
    ("python3 /usr/local/bin/hermes.real gateway run", None, False, False),
    ("python -m tui_gateway", None, False, False),
    ("python -m tui_gateway.main gateway run", None, False, False),
    ("python -m services.gateway_old", None, False, False),
    ("python -m services", None, False, False),
    ("python3 -m hermes_cli gateway run", None, False, False),  # the package has no __main__: nothing runs
    (boot("'hermes_cli.main'", "'hermes_cli'"), None, False, False),
    ("pythont -m hermes_cli.main gateway run", None, False, False),  # "t" follows a version only
    ("python3.13tt -m hermes_cli.main gateway run", None, False, False),
    ('python -c "import hermes_cli.main" gateway run', None, False, False),
    ('python -c "import sys" -m hermes_cli.main gateway run', None, False, False),
    ('python3 -Ic "import hermes_cli.main" gateway run', None, False, False),
    ("python3 -c hermes gateway run", None, False, False),  # "hermes" is program text here, not a script
    ('bash -c "hermes gateway run"', None, False, False),
    ("sudo hermes gateway run", None, False, False),
    ("nohup hermes gateway run", None, False, False),
    ("/usr/bin/env hermes gateway run", None, False, False),
    ("grep hermes gateway run", None, False, False),
    ("vim hermes_cli/main.py", None, False, False),
    ("node hermes gateway run", None, False, False),
    ("python other.py hermes gateway run", None, False, False),
    ("python3 myhermes_cli/main.py gateway run", None, False, False),
    ("python3 /opt/notgateway/run.py", None, False, False),
    ("python3 - gateway run", None, False, False),
    ("python3 -m", None, False, False),
    ("python3", None, False, False),
    ("python -m Hermes_CLI.main gateway run", None, False, False),
    ("PYTHON3 -m hermes_cli.main gateway run", None, False, False),
    ("HERMES gateway run", None, False, False),
    ("Hermes gateway run", None, False, False),
    ("Hermes-Gateway", None, False, False),
    # not the bootstrap
    (boot("__main__", "hermes"), None, False, False),  # its main block never runs
    (boot("'hermes_cli.main'", "'tui_gateway'"), None, False, False),
    (boot("import sys, runpy", "import sys, runpy, os"), None, False, False),
    (boot("import sys, runpy", "import sys as s, runpy"), None, False, False),
    (boot("import sys, runpy; ", ""), None, False, False),
    (boot("run_module", "run_path"), None, False, False),
    (boot("run_name=", "init_globals=g, run_name="), None, False, False),
    (boot("sys.argv = ", "sys.path = "), None, False, False),
    (boot("'gateway','run'", "'gateway'+'run'"), None, False, False),
    (boot("'gateway','run'", "'gateway',1"), None, False, False),
    (boot(tail="; print(1)"), None, False, False),
    (boot("; runpy", "; import os; runpy"), None, False, False),
    (boot("runpy.run_module", "(runpy.run_module", tail=")"), "gateway", True, True),
    (boot(")", "", tail=""), None, False, False),  # not Python
    ("python3 -c \"sys.argv = ['hermes', 'gateway', 'run']\"", None, False, False),
    (f'bash -c "{BOOT}"', None, False, False),
]


@pytest.mark.parametrize(("cmdline", "subcommand", "run", "runtime"), CASES)
def test_matchers(cmdline, subcommand, run, runtime):
    assert holder_subcommand(cmdline) == subcommand
    assert looks_like_gateway_command_line(cmdline) is run
    assert looks_like_gateway_runtime_command_line(cmdline) is runtime


@pytest.mark.parametrize(("cmdline", "subcommand", "run", "runtime"), [c for c in CASES if "\\" not in c[0]])
def test_list_form_agrees_with_string_form(cmdline, subcommand, run, runtime):
    argv = shlex.split(cmdline)
    assert holder_subcommand(argv) == subcommand
    assert holder_subcommand(tuple(argv)) == subcommand
    assert looks_like_gateway_command_line(argv) is run
    assert looks_like_gateway_runtime_command_line(argv) is runtime


@pytest.mark.parametrize(
    ("argv", "subcommand", "run"),
    [
        ([r"C:\Program Files\Hermes\hermes.exe", "gateway", "run"], "gateway", True),
        (["/opt/my hermes/hermes", "-p", "my profile", "gateway"], "gateway", True),
        (["/usr/bin/python3", "-c", "import hermes_cli.main", "gateway", "run"], None, False),
        (["bash", "-c", "hermes gateway run"], None, False),
        (["hermes gateway run"], None, False),  # one argv element, not three
        (["hermes", "", "gateway"], None, False),
    ],
)
def test_list_forms(argv, subcommand, run):
    assert holder_subcommand(argv) == subcommand
    assert looks_like_gateway_command_line(argv) is run


def test_the_bootstrap_is_read_never_run(short_dir):
    marker = short_dir / "ran"
    evil = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    programs = [
        f"import sys, runpy; sys.argv = [{evil}, 'gateway', 'run']; runpy.run_module('hermes_cli.main', run_name='__main__')",
        f"import sys, runpy; sys.argv = ['x', 'gateway', 'run']; runpy.run_module({evil}, run_name='__main__')",
        f"import sys, runpy; sys.argv = ['x', 'gateway']; runpy.run_module('hermes_cli.main', run_name={evil})",
        evil,
    ]
    for program in programs:
        assert holder_subcommand(["python3", "-c", program, "gateway", "run"]) is None
    assert not marker.exists()


@pytest.mark.parametrize(
    "program",
    [
        "(" * 3000,  # deeper than the parser goes
        "x" * 5000,  # longer than any bootstrap
        "'\\d'",  # an escape that makes ast warn
        "import sys, runpy; sys.argv = [" + "'a'," * 300 + "]; runpy.run_module('hermes_cli', run_name='__main__')",
        "\x00",
    ],
)
def test_a_program_that_is_no_bootstrap_is_nothing(program, recwarn):
    assert holder_subcommand(["python3", "-c", program]) is None
    assert len(recwarn) == 0


@pytest.mark.parametrize(
    "junk", [None, "", "   ", [], (), 42, 3.5, b"hermes gateway run", ["hermes", 3], [None], {"hermes": "gateway"}]
)
def test_non_command_lines_are_not_hermes(junk):
    assert holder_subcommand(junk) is None
    assert looks_like_gateway_command_line(junk) is False
    assert looks_like_gateway_runtime_command_line(junk) is False


# --- the set a multiplex gateway serves ------------------------------------------------------

SERVE_BOOT = (
    "import sys, runpy; sys.argv = ['/x/services/gateway/__main__.py','--serve','writer,coder']; "
    "runpy.run_module('services.gateway', run_name='__main__')"
)


@pytest.mark.parametrize(
    ("cmdline", "served"),
    [
        ("hermes gateway run --serve coder,writer", ("coder", "writer")),
        ("hermes gateway run --serve=writer,default,coder", ("default", "coder", "writer")),
        ("hermes -p coder gateway run --serve writer,coder", ("coder", "writer")),
        ("hermes gateway -p coder run --serve writer", ("writer",)),  # one named profile: still the set
        ("hermes gateway run --create-profile --serve ' b , a '", ("a", "b")),
        ("hermes gateway run -p --serve x --serve a", ("a",)),  # `--serve` as -p's value is no flag
        ("hermes gateway run --serve a --serve b,c", ("b", "c")),  # the last one wins
        ("/opt/venv/bin/python3 -m services.gateway --serve writer,coder", ("coder", "writer")),
        ("python -Im services.gateway --create-profile --serve=default", ("default",)),
        (f'python3 -c "{SERVE_BOOT}"', ("coder", "writer")),
        ("hermes-gateway --serve a,b", ("a", "b")),
        # per-profile gateways
        ("hermes gateway run", None),
        ("hermes -p coder gateway run", None),
        ("python -m services.gateway --profile coder", None),
        ("python -m services.gateway", None),
        # not the flag
        ("hermes gateway run -p --serve", None),
        ("hermes gateway run -- --serve a,b", None),
        ("hermes gateway run --serve", None),
        ("hermes gateway run --served a,b", None),
        ("hermes gateway run --preserve a,b", None),
        ("hermes gateway --serve a,b", None),  # the gateway group's parser has no --serve
        ("hermes --serve a,b gateway run", None),
        # no gateway, whatever the flag says
        ("hermes gateway status --serve a,b", None),
        ("hermes gateway drain --serve a,b", None),
        ("hermes dashboard serve --serve a,b", None),
        ("python -m hermes_cli.main kanban --serve a,b", None),
        ("bash -c 'hermes gateway run --serve a,b'", None),
        # a set the process refuses
        ("hermes gateway run --serve a,a", None),
        ("hermes gateway run --serve a,,b", None),
        ("hermes gateway run --serve ''", None),
        ("hermes gateway run --serve Coder", None),
        ("hermes gateway run --serve ../x", None),
        ("hermes gateway run --serve -p", None),
        ("hermes gateway run --serve " + ",".join(f"p{n}" for n in range(homes.MAX_SERVED + 1)), None),
    ],
)
def test_gateway_served_profiles(cmdline, served):
    assert gateway_served_profiles(cmdline) == served
    if "\\" not in cmdline:
        assert gateway_served_profiles(shlex.split(cmdline)) == served
    if served is not None:
        assert looks_like_gateway_command_line(cmdline)


def test_every_spelling_of_one_set_is_one_set():
    spellings = ["coder,writer,default", "default,writer,coder", "writer, default ,coder"]
    sets = {gateway_served_profiles(["hermes", "gateway", "run", "--serve", s]) for s in spellings}
    assert sets == {("default", "coder", "writer")}


# --- flags derived from the parser -----------------------------------------------------------


@pytest.fixture
def fresh_flags():
    value_flags.cache_clear()
    yield
    value_flags.cache_clear()  # drop anything computed from a patched parser


def test_value_flags_come_from_the_parser(fresh_flags):
    flags = value_flags()
    assert {"-p", "--profile", "-m", "--model", "-t", "--toolsets", "--reasoning", "-r", "--resume"} <= flags
    assert not flags & {"-c", "--continue"}
    assert not flags & {"--version", "-h", "--help"}
    assert value_flags("profile") == {"-p", "--profile"}  # a subcommand's own parser
    assert value_flags("gateway") == {"-p", "--profile"}
    assert value_flags("no-such-command") == frozenset()


def test_a_new_top_level_value_flag_is_picked_up(fresh_flags, monkeypatch):
    assert holder_subcommand("hermes --color gateway status") == "gateway"
    original = cli_grammar.build_top_level_parser

    def with_color():
        parser = original()
        parser.add_argument("--color", metavar="WHEN")
        return parser

    monkeypatch.setattr(cli_grammar, "build_top_level_parser", with_color)
    assert holder_subcommand("hermes --color gateway status") == "gateway"  # still cached
    value_flags.cache_clear()
    assert "--color" in value_flags()
    assert holder_subcommand("hermes --color gateway status") == "status"
    assert holder_subcommand("hermes --color=always gateway status") == "gateway"


def test_a_gateway_subparser_value_flag_is_picked_up(fresh_flags, monkeypatch):
    cmdline = "hermes gateway --config run status"
    assert looks_like_gateway_command_line(cmdline)
    original = cli_grammar.build_top_level_parser

    def with_gateway_config():
        parser = original()
        commands = next(a for a in parser._actions if a.choices and "doctor" in a.choices)
        commands.choices["gateway"].add_argument("--config", metavar="FILE")
        return parser

    monkeypatch.setattr(cli_grammar, "build_top_level_parser", with_gateway_config)
    value_flags.cache_clear()
    assert value_flags("gateway") == {"--config", "-p", "--profile"}
    assert not looks_like_gateway_command_line(cmdline)  # `run` is the config file; the action is status
    assert not looks_like_gateway_runtime_command_line(cmdline)
    assert looks_like_gateway_command_line("hermes gateway --config restart run")


# --- properties ------------------------------------------------------------------------------

ALPHABET = [
    "hermes",
    "hermes.exe",
    "HERMES",
    "python3",
    "python.exe",
    "/usr/local/bin/hermes",
    "hermes-gateway",
    "/opt/x/gateway/run.py",
    "hermes_cli.main",
    "hermes_cli/main.py",
    "services.gateway",
    "tui_gateway",
    "gateway",
    "run",
    "restart",
    "status",
    "serve",
    "kanban",
    "dashboard",
    "coder",
    "-p",
    "--profile",
    "--profile=gateway",
    "-pgateway",
    "-p=run",
    "-m",
    "--model",
    "--model=x",
    "-mx",
    "--",
    "-",
    "-c",
    "-u",
    "-I",
    "-X",
    "utf8",
    "-W",
    "-Wignore",
    "--preserve-cache",
    "--json",
    "",
]
token_lists = st.lists(st.sampled_from(ALPHABET), max_size=10)


@given(token_lists, st.sampled_from(['"', "'"]))
def test_matchers_agree_on_list_and_quoted_string(tokens, quote):
    joined = " ".join(f"{quote}{t}{quote}" for t in tokens)
    assert holder_subcommand(tokens) == holder_subcommand(joined)
    run = looks_like_gateway_command_line(tokens)
    assert run == looks_like_gateway_command_line(joined)
    assert looks_like_gateway_runtime_command_line(tokens) == looks_like_gateway_runtime_command_line(joined)
    if run:
        assert looks_like_gateway_runtime_command_line(tokens)


@given(st.one_of(st.text(), st.lists(st.text(), max_size=8)))
def test_matchers_never_raise(cmdline):
    served = gateway_served_profiles(cmdline)
    assert served is None or (served and looks_like_gateway_command_line(cmdline))
    sub = holder_subcommand(cmdline)
    assert sub is None or isinstance(sub, str)
    if looks_like_gateway_command_line(cmdline):
        assert looks_like_gateway_runtime_command_line(cmdline)


SERVE_ALPHABET = [
    *ALPHABET,
    "--serve",
    "--serve=",
    "--serve=a,b",
    "a,b",
    "b,a,default",
    "a,a",
    "--create-profile",
    "x,",
]


@given(st.lists(st.sampled_from(SERVE_ALPHABET), max_size=10))
def test_a_served_set_is_only_ever_a_valid_set_of_a_gateway(tokens):
    served = gateway_served_profiles(tokens)
    if served is not None:
        assert looks_like_gateway_command_line(tokens)
        assert served == homes.parse_served(",".join(served))
