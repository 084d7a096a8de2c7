"""The ``agent-latency`` command line: ``sim``, ``bench``, ``doctor``, ``trim``.

One module per command (``_sim``, ``_bench``, ``_doctor``, ``_trim``) over the library's
subpackages; ``_app`` assembles them. Only this package imports typer and rich, which come with
the ``cli`` extra (``pip install 'agent-latency[cli]'``, the simulator's server included):
:func:`main` says so in one line when they are missing. Every command reports bad input as one
line on stderr and exits with status 2.

Exports: ``app`` (the typer application, imported on first use) and ``main`` (the console-script
entry point).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from agent_latency.cli._app import app

__all__ = ["app", "main"]

CLI_EXTRA: Final = "pip install 'agent-latency[cli]'"
_CLI_PACKAGES: Final = frozenset({"typer", "click", "rich", "starlette", "uvicorn"})


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns its exit status.

    Args:
        argv: The arguments; default: ``sys.argv[1:]``.

    Returns:
        0 on success, 1 when a check or gate fails, 2 for bad input (one line on stderr), and 2
        when the ``cli`` extra is missing (the line names the command that installs it): for
        every command when typer is, for the command that needs it otherwise (``sim`` needs
        starlette; ``--version`` needs neither).
    """
    try:
        from agent_latency.cli._app import main as run

        return run(argv)  # a command's module, and its stack, is imported when it is used
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _CLI_PACKAGES:
            raise
        print(
            f"agent-latency: the command line needs the cli extra ({exc.name} is not "
            f"installed). Fix: {CLI_EXTRA}",
            file=sys.stderr,
        )
        return 2


def __getattr__(name: str) -> Any:
    if name == "app":
        from agent_latency.cli._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
