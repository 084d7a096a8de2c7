"""The command line's help: ``-h`` everywhere, no ``<bool>`` on flags, help with no arguments.

Also that the CLI reaches typer only through its public names: typer's
vendored click is a private module that may move in any release; and that ``--version``,
``--help`` and a mistyped command load no command's stack.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from agent_latency import cli as _cli

SRC = Path(__file__).resolve().parents[2] / "src" / "agent_latency"
COMMANDS = ["sim", "bench", "doctor", "trim"]
# The incubating GenAI names are published only under this path (OpenTelemetry's documented way).
ALLOWED_PRIVATE = ("opentelemetry.semconv._incubating",)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = _cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_dash_h_prints_the_same_help_as_dash_dash_help(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    short = run(capsys, *command, "-h")
    long = run(capsys, *command, "--help")

    assert short == long
    status, out, err = short
    assert status == 0 and err == ""
    assert out.startswith(f"Usage: agent-latency {' '.join(command)}".rstrip())
    assert "-h, --help" in out


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_help_shows_no_value_for_flags(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    _, out, _ = run(capsys, *command, "--help")

    assert "<bool>" not in out
    assert "--help" in out


def test_no_arguments_prints_the_help_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys)

    assert status == 0 and err == ""
    assert out == run(capsys, "--help")[1]
    assert all(name in out for name in COMMANDS)


def test_help_at_80_columns_shows_every_option_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    group = typer.main.get_command(_cli.app)
    assert isinstance(group, typer.core.TyperGroup)
    context = typer.Context(group)
    commands = [(name, group.get_command(context, name)) for name in COMMANDS]
    for name, command in [("", group), *commands]:
        assert command is not None
        _, out, _ = run(capsys, *([name] if name else []), "--help")
        assert max(len(line) for line in out.splitlines()) <= 80, name
        words = set(out.replace(",", " ").split())
        for param in command.params:
            assert set(param.opts) - {param.name} <= words, (name, param.opts)


def test_no_module_imports_another_package_s_private_module() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            found += [
                f"{path.relative_to(SRC)}: {name}"
                for name in names
                if not name.startswith("agent_latency")
                and not name.startswith(ALLOWED_PRIVATE)
                and any(
                    part.startswith("_") and not part.startswith("__") for part in name.split(".")
                )
            ]

    assert found == []


def test_trim_names_its_file_argument_file(capsys: pytest.CaptureFixture[str]) -> None:
    # It read "Usage: agent-latency trim [OPTIONS] {file}"; typer marks a required argument
    # with braces.
    _, out, _ = run(capsys, "trim", "--help")

    lines = out.splitlines()
    assert lines[0] == "Usage: agent-latency trim [OPTIONS] {FILE}"
    assert any(line.strip().startswith("FILE <path>") for line in lines)
    assert "{file}" not in out and " file " not in out


def test_the_command_list_shows_each_command_s_own_summary() -> None:
    from agent_latency.cli._app import COMMANDS as SUMMARIES

    assert list(SUMMARIES) == COMMANDS
    for name, summary in SUMMARIES.items():
        function = getattr(importlib.import_module(f"agent_latency.cli._{name}"), name)
        assert (inspect.getdoc(function) or "").split("\n\n")[0] == summary


# What only a command needs: its module, and the stacks behind bench, sim, doctor and trim.
HEAVY = (
    "agent_latency.cli._bench",
    "agent_latency.cli._sim",
    "agent_latency.cli._doctor",
    "agent_latency.cli._trim",
    "agent_latency.cli._tables",
    "agent_latency.bench",
    "agent_latency.sim",
    "agent_latency.doctor",
    "rich",
    "uvicorn",
    "starlette",
)


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], ["-h"], [], ["bnch"], ["--no-such-flag"]], ids=str
)
def test_version_help_and_argument_errors_load_no_command(argv: list[str]) -> None:
    # Every start loaded the bench and simulator stacks: --version took 2.1-2.3x the import.
    program = (
        "import contextlib, io, json, sys\n"
        "from agent_latency.cli import main\n"
        "quiet = io.StringIO()\n"
        "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
        f"    status = main({argv!r})\n"
        f"print(json.dumps([status, sorted(m for m in sys.modules if m.startswith({HEAVY!r}))]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )

    status, loaded = json.loads(done.stdout)
    assert status == (2 if argv[:1] in (["bnch"], ["--no-such-flag"]) else 0)
    assert loaded == []
