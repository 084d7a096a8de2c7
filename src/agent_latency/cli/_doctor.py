"""``agent-latency doctor``: prints each check of :mod:`agent_latency.doctor` with its fix."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console
from rich.text import Text

from agent_latency._redaction import display_url
from agent_latency.config import Settings, load_settings, with_channel_overrides
from agent_latency.doctor import CheckStatus, Endpoint, printable, run_checks

_CONFIG_LOGGER: Final = "agent_latency.config"
_STYLES: Final = {
    CheckStatus.PASS: "bold green",
    CheckStatus.WARN: "bold yellow",
    CheckStatus.FAIL: "bold red",
}


def doctor(
    config: Annotated[
        Path | None, typer.Option("--config", help="config.toml to read (default: ./config.toml).")
    ] = None,
    settings: Annotated[
        Path | None,
        typer.Option("--settings", help="settings.json to read (default: ./settings.json)."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="API root to check instead of llm.base_url.")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Model to check instead of llm.model.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Key to use instead of llm.api_key (AGENT_LATENCY_API_KEY keeps it out of "
            "the process list).",
        ),
    ] = None,
) -> None:
    """Check the configuration and the endpoint; print pass/warn/fail with a fix for each.

    Exits 0 when no check fails (warnings included), 1 when a check fails, and 2 when the
    configuration or an option is invalid (one line on stderr, no check run).
    """
    with _settings_warnings_shown_as_checks() as shown_as_checks:
        loaded = with_channel_overrides(
            load_settings(config, settings), base_url=base_url, model=model, api_key=api_key
        )
        shown_as_checks(loaded)
    console = Console(highlight=False)
    with Endpoint(loaded) as endpoint:
        shown = display_url(endpoint.base_url)
        console.print(
            Text(printable(f"agent-latency doctor: {shown}, model {loaded.llm.model}")),
            soft_wrap=True,
        )
        counts = dict.fromkeys(CheckStatus, 0)
        for result in run_checks(loaded, endpoint=endpoint):
            counts[result.status] += 1
            line = Text()
            line.append(f"{result.status.value.upper():<5}", style=_STYLES[result.status])
            line.append(f" {result.name}: {result.message}")
            console.print(line, soft_wrap=True)
            if result.fix and result.status is not CheckStatus.PASS:
                console.print(Text(f"      fix: {result.fix}", style="dim"), soft_wrap=True)
    warnings = counts[CheckStatus.WARN]
    console.print(
        f"{counts[CheckStatus.PASS]} passed, {warnings} warning{'' if warnings == 1 else 's'}, "
        f"{counts[CheckStatus.FAIL]} failed",
        soft_wrap=True,
    )
    if counts[CheckStatus.FAIL]:
        raise typer.Exit(code=1)


@contextmanager
def _settings_warnings_shown_as_checks() -> Iterator[Callable[[Settings], None]]:
    """Holds back what the config loader logs while it loads; the settings' own warnings
    (a base_url that looks like a website) are then printed once, as WARN checks, and anything
    else the loader logged goes on to the log as usual.

    Yields:
        A function to call with the loaded settings.
    """
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        held.append(record)
        return False

    shown: set[str] = set()
    logger = logging.getLogger(_CONFIG_LOGGER)
    logger.addFilter(hold)
    try:
        yield lambda loaded: shown.update(loaded.warnings)
    finally:
        logger.removeFilter(hold)
        for record in held:
            if record.getMessage() not in shown:
                logger.handle(record)
