"""The ``agent-latency`` command line: ``sim``, ``bench``, ``doctor``, ``trim``.

Every command reports bad input (files, flags, configuration) as one line on stderr and exits
with status 2; no traceback reaches the user.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Final

import typer

HELP_OPTIONS: Final = ("-h", "--help")
"""The flags that print a command's help; with no arguments at all, the app prints its own."""

app = typer.Typer(
    name="agent-latency",
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


def _register_commands() -> None:
    # Each command lives in the module that owns its idea; this module only assembles them.
    from agent_latency.cli._bench import bench
    from agent_latency.cli._doctor import doctor
    from agent_latency.cli._sim import sim
    from agent_latency.cli._trim import trim

    app.command()(sim)
    app.command()(bench)
    app.command()(doctor)
    app.command()(trim)


_register_commands()


def _one_line(error: BaseException) -> str:
    text = error.format_message() if isinstance(error, typer.TyperException) else str(error)
    return " ".join(text.split()) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI and returns its exit status (2 for bad input, with one line on stderr)."""
    args = list(argv) if argv is not None else sys.argv[1:]
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
