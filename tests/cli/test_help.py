"""The command line's help: ``-h`` everywhere, no ``<bool>`` on flags, help with no arguments.

Also that the CLI reaches typer only through its public names (issue 10 item 6): typer's
vendored click is a private module that may move in any release.
"""

from __future__ import annotations

import ast
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
    for name, command in [("", group), *getattr(group, "commands", {}).items()]:
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
