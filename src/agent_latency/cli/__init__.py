"""The ``agent-latency`` command line: ``sim``, ``bench``, ``doctor``, ``trim``.

One module per command (``_sim``, ``_bench``, ``_doctor``, ``_trim``) over the library's
subpackages; ``_app`` assembles them. Only this package imports typer and rich. Every command
reports bad input as one line on stderr and exits with status 2.

Exports: ``app`` (the typer application) and ``main`` (the console-script entry point).
"""

from agent_latency.cli._app import app, main

__all__ = ["app", "main"]
