"""What every example shares: which endpoint to call and where the traces go.

With no endpoint configured (no ``--base-url``, no ``base_url`` in ``config.toml``), the examples
start agent-latency's embedded simulator, so they run with no key and no network.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from pydantic import SecretStr

from agent_latency import Settings, Telemetry, TrimResult, configure_telemetry, load_settings
from agent_latency.semconv import TRIM_SPAN_NAME
from agent_latency.sim import SimulatorConfig, running_simulator


class TrimReport(BaseCallbackHandler):
    """Keeps each ``TrimResult`` the trimmer reports during a run, in order.

    The trimmer reports every trim as the LangChain custom event ``agent_latency.trim``. Reading
    it there shows what was trimmed without trimming again: a second ``trimmer.trim(...)`` after
    the run would record one more trim span, in a trace of its own.
    """

    def __init__(self) -> None:
        self.results: list[TrimResult] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name == TRIM_SPAN_NAME and isinstance(data, TrimResult):
            self.results.append(data)


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the options every example takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--base-url", help="OpenAI-compatible API root (default: simulator)")
    parser.add_argument("--model", help="model name")
    parser.add_argument("--api-key", help="API key (or AGENT_LATENCY_API_KEY)")
    parser.add_argument("--config", help="config.toml (default: ./config.toml if present)")
    parser.add_argument("--settings", help="settings.json (default: ./settings.json if present)")
    parser.add_argument("--otlp", action="store_true", help="export to OTLP instead of console")
    parser.add_argument("--otlp-endpoint", help="collector URL, e.g. http://localhost:4318")
    return parser.parse_args(argv)


@contextlib.contextmanager
def example_setup(args: argparse.Namespace) -> Iterator[tuple[Settings, Telemetry]]:
    """Yields the settings to use and the configured telemetry; cleans both up on exit."""
    settings = load_settings(args.config, args.settings)
    llm_overrides = {
        name: value
        for name, value in (
            ("base_url", args.base_url),
            ("model", args.model),
            ("api_key", SecretStr(args.api_key) if args.api_key else None),
        )
        if value is not None
    }
    settings = dataclasses.replace(settings, llm=dataclasses.replace(settings.llm, **llm_overrides))
    with contextlib.ExitStack() as stack:
        if settings.llm.base_url is None:
            simulator = stack.enter_context(
                running_simulator(SimulatorConfig(model=settings.llm.model))
            )
            settings = dataclasses.replace(
                settings, llm=dataclasses.replace(settings.llm, base_url=simulator.base_url)
            )
        telemetry = configure_telemetry(
            settings,
            service_name="agent-latency-example",
            exporter="otlp" if args.otlp else "console",
            endpoint=args.otlp_endpoint,
        )
        stack.callback(telemetry.shutdown)
        yield settings, telemetry
