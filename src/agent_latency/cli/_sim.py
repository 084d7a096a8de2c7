"""``agent-latency sim``: serves the latency simulator (:mod:`agent_latency.sim`) on loopback."""

from __future__ import annotations

from typing import Annotated

import typer


def sim(
    host: Annotated[str, typer.Option(help="Address to bind; loopback by default.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    overhead_ms: Annotated[float, typer.Option(help="Fixed time before prefill.")] = 200.0,
    prefill_ms_per_token: Annotated[
        float, typer.Option(help="Prefill cost per uncached prompt token.")
    ] = 0.4,
    decode_tokens_per_s: Annotated[float, typer.Option(help="Output tokens per second.")] = 50.0,
    answer_tokens: Annotated[int, typer.Option(help="Answer length without max_tokens.")] = 64,
    prefix_cache: Annotated[bool, typer.Option(help="Reuse shared prompt prefixes.")] = True,
    api_key: Annotated[
        str | None, typer.Option(envvar="AGENT_LATENCY_SIM_API_KEY", help="Require this key.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name served.")] = None,
    error_rate: Annotated[float, typer.Option(help="Share of requests answered 500.")] = 0.0,
    stall_after_chunks: Annotated[
        int | None, typer.Option(help="Pause once after this many chunks.")
    ] = None,
    stall_ms: Annotated[float, typer.Option(help="Length of that pause.")] = 1000.0,
    buffered: Annotated[
        bool, typer.Option(help="Hold all chunks to the end, like a buffering proxy.")
    ] = False,
    log_level: Annotated[
        str, typer.Option(help="uvicorn log level; 'info' logs every request.")
    ] = "warning",
) -> None:
    """Serve the OpenAI chat-completions API with a stated latency model."""
    from agent_latency.sim import SimulatorConfig, run_simulator

    options = {
        "overhead_ms": overhead_ms,
        "prefill_ms_per_token": prefill_ms_per_token,
        "decode_tokens_per_s": decode_tokens_per_s,
        "answer_tokens": answer_tokens,
        "prefix_cache": prefix_cache,
        "api_key": api_key,
        "error_rate": error_rate,
        "stall_after_chunks": stall_after_chunks,
        "stall_ms": stall_ms,
        "buffered": buffered,
    }
    if model is not None:
        options["model"] = model
    config = SimulatorConfig(**options)  # type: ignore[arg-type]
    run_simulator(
        config,
        host=host,
        port=port,
        log_level=log_level,
        on_listening=lambda url: typer.echo(
            f"agent-latency simulator on {url} (Ctrl-C to stop)", err=True
        ),
    )
