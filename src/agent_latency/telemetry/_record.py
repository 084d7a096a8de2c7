"""What one model call measured: its :class:`LatencyRecord`, span attributes and log lines."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency.telemetry._langchain import Response
from agent_latency.telemetry._log import logger
from agent_latency.telemetry._run_state import ModelRunState, PendingTrim
from agent_latency.telemetry._timing import CallTiming


@dataclass(frozen=True, slots=True)
class LatencyRecord:
    """What one model call measured, handed to ``on_record`` when the call ends.

    Attributes:
        run_id: LangChain's id of the call.
        model: The requested model (``"unknown"`` when the integration does not say).
        streaming: Whether the call streamed.
        ttft_ms: Milliseconds to the first content chunk; the total for a blocking call;
            ``None`` when the call failed before any content arrived, and always ``None`` when
            the handler's ``record_ttft`` is off.
        total_ms: Milliseconds from start to end.
        chunks: Content chunks received.
        stalls: Waits between chunks longer than ``chunk_timeout_ms``.
        max_chunk_gap_ms: The longest wait between chunks (or from the last one to the end).
        input_tokens: Prompt tokens the server reported, if it did.
        estimated_input_tokens: Our count of the prompt: the trim's count of the whole request
            when a trim prepared the call, else the messages counted locally; if it could be.
        output_tokens: Completion tokens the server reported, if it did.
        ttft_level: ``"ok"``, ``"warn"`` or ``"error"``; ``None`` without a TTFT.
        error_type: The exception type when the call failed or was cancelled.
        outcome: ``"ok"``, ``"error"``, ``"cancelled"`` or ``"abandoned"`` (the consumer stopped
            reading the stream).
        cache_read_tokens: Prompt tokens the server reported reading from its prefix cache;
            ``None`` when it said nothing about caching.
    """

    run_id: UUID
    model: str
    streaming: bool
    ttft_ms: float | None
    total_ms: float
    chunks: int
    stalls: int
    max_chunk_gap_ms: float
    input_tokens: int | None
    estimated_input_tokens: int | None
    output_tokens: int | None
    ttft_level: str | None
    error_type: str | None
    outcome: str
    cache_read_tokens: int | None = None


def end_attributes(
    state: ModelRunState, timing: CallTiming, usage: Response, estimated: int | None
) -> dict[str, AttributeValue]:
    """The attributes a model-call span gets when the call ends."""
    optional: dict[str, AttributeValue | None] = {
        semconv.TTFT_MS: timing.ttft_ms,
        semconv.TTFT_LEVEL: timing.ttft_level,
        gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: timing.first_chunk_s,
        semconv.ESTIMATED_INPUT_TOKENS: estimated,
        gen_ai.GEN_AI_RESPONSE_MODEL: usage.model,
        gen_ai.GEN_AI_RESPONSE_ID: usage.id,
        gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: usage.finish_reasons or None,
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
        gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_creation_tokens,
        semconv.PREFILLED_INPUT_TOKENS: usage.prefilled_tokens,
        semconv.INPUT_TOKENS_RATIO: (
            usage.input_tokens / estimated if usage.input_tokens is not None and estimated else None
        ),
    }
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_REQUEST_STREAM: state.streamed,
        semconv.TOTAL_MS: timing.total_ms,
        semconv.CHUNKS: state.chunks,
        semconv.MAX_CHUNK_GAP_MS: state.max_gap_ns / 1e6,
        semconv.STALLS: state.stalls,
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})
    return attributes


_SLOW_STREAMED = (
    "slow first token: %s took %.0f ms (threshold %.0f ms) with %s input tokens, %s. Hint: %s"
)
_SLOW_BLOCKING = (
    "slow answer: %s took %.0f ms (threshold %.0f ms) for a blocking call with %s input "
    "tokens, %s; its first text arrives with the whole answer. Hint: stream the call "
    "(streaming.enabled = true, or model.stream()) so the first tokens show while the rest "
    "is generated."
)
_HINT_TRIM = (
    "lower prompt.token_budget or trim history so the server prefills less; if the prompt is "
    "already small, the server is queueing."
)
_HINT_FIXED = (
    "the part no trim removes is over the budget ({cause}): lowering prompt.token_budget cannot "
    "help; send less of it (fewer or shorter tool definitions, a shorter system prompt)."
)


def _hint(trim: PendingTrim | None) -> str:
    cause = None if trim is None else trim.attributes.get(semconv.TRIM_OVER_BUDGET_CAUSE)
    return _HINT_FIXED.format(cause=cause) if isinstance(cause, str) and cause else _HINT_TRIM


def log_record(
    record: LatencyRecord,
    trim: PendingTrim | None,
    *,
    threshold_ms: float,
    every_request: bool,
) -> None:
    """Logs a call: a WARNING or ERROR when its TTFT crossed a threshold, INFO if asked.

    Args:
        record: The call.
        trim: The trim that prepared it, if any.
        threshold_ms: The threshold its ``ttft_level`` crossed (unused for ``"ok"``).
        every_request: Whether to log the INFO line of every call.
    """
    tokens = (
        record.input_tokens if record.input_tokens is not None else record.estimated_input_tokens
    )
    shown_tokens = "unknown" if tokens is None else str(tokens)
    if record.cache_read_tokens is not None and record.input_tokens is not None:
        shown_tokens += f" ({record.cache_read_tokens} cached)"
    if record.ttft_level in ("warn", "error") and record.ttft_ms is not None:
        budget = f"trim budget {trim.budget}" if trim is not None else "no trim before it"
        level = logging.ERROR if record.ttft_level == "error" else logging.WARNING
        common = (record.model, record.ttft_ms, threshold_ms, shown_tokens, budget)
        if record.streaming:
            logger.log(level, _SLOW_STREAMED, *common, _hint(trim))
        else:
            logger.log(level, _SLOW_BLOCKING, *common)
    if every_request:
        logger.info(
            "model call: %s ttft=%s total=%.0f ms input_tokens=%s output_tokens=%s "
            "chunks=%d stalls=%d outcome=%s",
            record.model,
            f"{record.ttft_ms:.0f} ms" if record.ttft_ms is not None else "none",
            record.total_ms,
            shown_tokens,
            record.output_tokens if record.output_tokens is not None else "unknown",
            record.chunks,
            record.stalls,
            record.outcome,
        )
