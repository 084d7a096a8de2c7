"""The ``agent-latency`` command line: ``sim``, ``bench``, ``doctor``, ``trim``.

Every command reports bad input (files, flags, configuration) as one line on stderr and exits
with status 2; no traceback reaches the user. A command's module (and the stack behind it: the
bench, the simulator's server, the doctor) is imported only when that command runs or shows its
help: ``--version``, ``--help`` and a mistyped command load none of them.
"""

from __future__ import annotations

import importlib
import io
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Final

import typer
from typer.core import TyperCommand, TyperGroup

HELP_OPTIONS: Final = ("-h", "--help")
"""The flags that print a command's help; with no arguments at all, the app prints its own."""

COMMANDS: Final = {
    "sim": "Serve the OpenAI chat-completions API with a stated latency model.",
    "bench": (
        "Measure TTFT and total time, untrimmed/trimmed × blocking/streaming, on an endpoint."
    ),
    "doctor": "Check the configuration and the endpoint; print pass/warn/fail with a fix for each.",
    "trim": "Trim a request and show, message by message, what was kept, dropped or shortened.",
}
"""Each command, in the order of the help, and its summary: the first paragraph of its
function's docstring in ``agent_latency.cli._{name}`` (a test holds them equal)."""


class _Summary(TyperCommand):
    """A command's name and summary, standing in for it until it is run or asked for help."""

    def __init__(self, name: str) -> None:
        super().__init__(name, help=COMMANDS[name], rich_markup_mode=None)

    def load(self) -> TyperCommand:
        """Imports the command's module and returns the command it defines."""
        name = self.name or ""
        function = getattr(importlib.import_module(f"agent_latency.cli._{name}"), name)
        single = typer.Typer(
            add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
        )
        single.command(name=name)(function)
        command = typer.main.get_command(single)
        assert isinstance(command, TyperCommand)
        return command


class _LazyGroup(TyperGroup):
    """The app's group: lists the commands by their summaries, imports one when it is used."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.commands.update({name: _Summary(name) for name in COMMANDS})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Summary):
            command = self.commands[cmd_name] = command.load()
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # As the group's own listing, from the summaries: no command's module is imported.
        limit = formatter.width - 6 - max(map(len, self.commands))
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    (name, command.get_short_help_str(limit))
                    for name, command in self.commands.items()
                ]
            )


app = typer.Typer(
    name="agent-latency",
    cls=_LazyGroup,
    help="Trim prompts by priority and measure time to first token on any OpenAI-compatible API.",
    no_args_is_help=True,  # for callers of app itself; main() asks for --help (exit 0) instead
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: it wraps to any terminal width, and flags show no "<bool>" value. The help
    # option names reach every command through the context.
    rich_markup_mode=None,
    context_settings={"help_option_names": list(HELP_OPTIONS)},
)


def _print_version(value: bool) -> None:
    if value:
        from agent_latency import __version__

        typer.echo(f"agent-latency {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Trim prompts by priority and measure time to first token on any OpenAI-compatible API."""


def _one_line(error: BaseException) -> str:
    text = error.format_message() if isinstance(error, typer.TyperException) else str(error)
    return " ".join(text.split()) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI and returns its exit status (2 for bad input, with one line on stderr)."""
    args = list(argv) if argv is not None else sys.argv[1:]
    for stream in (sys.stdout, sys.stderr):
        # A terminal that cannot show '·', 'Δ' or '≈' (PYTHONIOENCODING=ascii, a cp1252 console)
        # gets '?' for them, not an error after the run that loses its results.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    try:
        result = app(
            args=args or [HELP_OPTIONS[-1]], prog_name=app.info.name, standalone_mode=False
        )
    except typer.Exit as exit_:
        return exit_.exit_code
    except typer.Abort:
        return 130
    except (typer.TyperException, ValueError, OSError) as error:
        print(f"agent-latency: error: {_one_line(error)}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
