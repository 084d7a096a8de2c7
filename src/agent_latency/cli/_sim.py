"""``agent-latency sim``: serves the latency simulator (:mod:`agent_latency.sim`) on loopback."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer

from agent_latency.cli._command import options_command
from agent_latency.sim import SimulatorConfig, run_simulator
from agent_latency.tokens import TokenCounter

_DEFAULT = SimulatorConfig()
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
_SERVED: tuple[str, ...] = ("host", "port", "model", "log_level")
"""The options that are not the simulator's own latency and behaviour fields."""


@dataclass(frozen=True)
class SimFlags:
    """The options of ``agent-latency sim``: where to serve, and the simulator's fields."""

    host: Annotated[str, typer.Option(help="Address to bind; loopback by default.")] = "127.0.0.1"
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 8000
    overhead_ms: Annotated[float, typer.Option(help="Fixed time before prefill.")] = (
        _DEFAULT.overhead_ms
    )
    prefill_ms_per_token: Annotated[
        float, typer.Option(help="Prefill cost per uncached prompt token.")
    ] = _DEFAULT.prefill_ms_per_token
    attention_ms_per_1k_context: Annotated[
        float,
        typer.Option(
            help="What each uncached token costs more per 1,000 tokens of prompt it attends over."
        ),
    ] = _DEFAULT.attention_ms_per_1k_context
    decode_tokens_per_s: Annotated[float, typer.Option(help="Output tokens per second.")] = (
        _DEFAULT.decode_tokens_per_s
    )
    answer_tokens: Annotated[int, typer.Option(help="Answer length without max_tokens.")] = (
        _DEFAULT.answer_tokens
    )
    context_window: Annotated[
        int | None, typer.Option(help="Refuse prompt + max_tokens above this; default no limit.")
    ] = _DEFAULT.context_window
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Counts prompt tokens: cl100k, o200k, qwen, llama3 or a model name; "
            "default: the served model's own."
        ),
    ] = _DEFAULT.tokenizer
    prefix_cache: Annotated[bool, typer.Option(help="Reuse cached prompt prefixes.")] = (
        _DEFAULT.prefix_cache
    )
    cache_tokens: Annotated[
        int, typer.Option(help="Prefix cache capacity in tokens, LRU across conversations.")
    ] = _DEFAULT.cache_tokens
    cache_block_tokens: Annotated[
        int, typer.Option(help="Only whole blocks of this many tokens are reused.")
    ] = _DEFAULT.cache_block_tokens
    cache_lifetime_s: Annotated[
        float | None, typer.Option(help="Cached blocks expire after this idle time; default never.")
    ] = _DEFAULT.cache_lifetime_s
    api_key: Annotated[
        str | None, typer.Option(envvar="AGENT_LATENCY_SIM_API_KEY", help="Require this key.")
    ] = None
    model: Annotated[str | None, typer.Option(help="Model name served.")] = None
    error_rate: Annotated[float, typer.Option(help="Share of requests answered 500.")] = (
        _DEFAULT.error_rate
    )
    stall_after_chunks: Annotated[
        int | None, typer.Option(help="Pause once after this many chunks.")
    ] = _DEFAULT.stall_after_chunks
    stall_ms: Annotated[float, typer.Option(help="Length of that pause.")] = _DEFAULT.stall_ms
    buffered: Annotated[
        bool, typer.Option(help="Hold all chunks to the end, like a buffering proxy.")
    ] = _DEFAULT.buffered
    log_level: Annotated[
        LogLevel, typer.Option(help="uvicorn's log level; info logs every request.")
    ] = "warning"

    def simulator(self) -> SimulatorConfig:
        """The simulator these options describe (the default model unless one is named)."""
        fields: dict[str, Any] = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in _SERVED
        }
        if self.model is not None:
            fields["model"] = self.model
        return SimulatorConfig(**fields)


@options_command(SimFlags)
def sim(options: SimFlags) -> None:
    """Serve the OpenAI chat-completions API with a stated latency model.

    Time to first token = overhead + uncached prompt tokens x (prefill per token + attention
    per 1k context x prompt tokens / 1000); then the answer at the decode rate. The defaults
    give an 8,200-token prompt about 3.5 s to its first token, and a prefix cache like vLLM's
    serving a 7B model on one 80 GB GPU.

    Answers are filler text, or tool calls when tools are offered and the last message is the
    user's (or tool_choice requires one): the tools the latest user message names (by name or a
    word of it; several are called in parallel unless parallel_tool_calls is false), else the
    one whose description shares the most words with it, else the next tool in turn. After a
    tool result the answer is text.
    """
    config = options.simulator()
    # Said, because a name it does not know is taken for a model's and counted as cl100k.
    counted_as = TokenCounter.for_model(config.prompt_tokenizer).name
    try:
        run_simulator(
            config,
            host=options.host,
            port=options.port,
            log_level=options.log_level,
            on_listening=lambda url: typer.echo(
                f"agent-latency simulator on {url}, prompt tokens counted as {counted_as} "
                "(Ctrl-C to stop)",
                err=True,
            ),
        )
    except OSError as exc:  # the address cannot be bound: in use, not this machine's, unknown
        raise ValueError(
            f"--host {options.host} --port {options.port}: cannot listen there "
            f"({exc.strerror or exc}). Fix: give a free --port (0 picks one), and a --host "
            "address of this machine (the default, 127.0.0.1, serves only this machine)."
        ) from None
