"""What one model call measured: its :class:`CallOutcome`, worked out once when it ends, and
what that becomes: the span's end attributes, the :class:`LatencyRecord` and the log lines."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._server_usage import ServerUsage
from agent_latency._trace_link import PendingTrim
from agent_latency.telemetry._langchain import Response
from agent_latency.telemetry._log import logger
from agent_latency.telemetry._run_state import ModelRunState
from agent_latency.telemetry._split import SlowCause, TtftSplit
from agent_latency.telemetry._timing import CallTiming


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What a finished model call measured, worked out once and handed to its span, metrics,
    record, log and what learns from it.

    Attributes:
        timing: What the call's clock readings say.
        response: What its response says: the names and the server's usage.
        split: Where its time to first token went, when the server said enough.
        estimated_tokens: Our count of the request: the trim's count of the whole request when
            a trim prepared the call, else the messages and tools counted locally; if it could be.
        status: ``"ok"``, ``"error"``, ``"cancelled"``, ``"abandoned"`` or ``"interrupted"``.
        error_type: The exception type of a failed or cancelled call (not of an abandoned or
            interrupted one).
        first_token_ms: The time to first token the latency model learns from: ``None`` for a
            blocking call (its first text waits for the whole answer) and when none was measured.
        cause: What held the first token up.
        held_ms: How long the server generated before the first content chunk, if it said.
        threshold_ms: The TTFT threshold its ``ttft_level`` crossed (the warning one for ``ok``).
    """

    timing: CallTiming
    response: Response
    split: TtftSplit | None
    estimated_tokens: int | None
    status: str
    error_type: str | None
    first_token_ms: float | None
    cause: SlowCause
    held_ms: float | None
    threshold_ms: float

    @property
    def usage(self) -> ServerUsage:
        """What the server reported about the call."""
        return self.response.usage


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
            when a trim prepared the call, else the messages and the tools sent with them counted
            locally; if it could be.
        output_tokens: Completion tokens the server reported, if it did.
        ttft_level: ``"ok"``, ``"warn"`` or ``"error"``; for a call that failed or was
            cancelled before any content, the level its whole wait reached, when above
            ``"ok"``; else ``None`` without a TTFT.
        error_type: The exception type when the call failed or was cancelled.
        outcome: ``"ok"``, ``"error"``, ``"cancelled"``, ``"interrupted"`` (a LangGraph
            ``interrupt()``) or ``"abandoned"`` (the consumer stopped reading the stream).
        cache_read_tokens: Prompt tokens the server reported reading from its prefix cache;
            ``None`` when it said nothing about caching.
        prefilled_tokens: Prompt tokens the server reported prefilling (llama.cpp's
            ``timings.prompt_n``, else the prompt tokens less the cached ones); ``None`` when
            it said neither.
        server_prefill_ms: How long the server said it prefilled, when it said so and the
            call's time to first token could be split by it (see ``ttft_remainder_ms``).
        server_decode_ms: A blocking call's: how long the server said it generated the answer.
        ttft_remainder_ms: The rest of the time to first token: client, network and the
            server's queue. ``server_prefill_ms`` (and for a blocking call ``server_decode_ms``)
            and this add up to ``ttft_ms``; all three ``None`` without the server's timings.
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
    prefilled_tokens: int | None = None
    server_prefill_ms: float | None = None
    server_decode_ms: float | None = None
    ttft_remainder_ms: float | None = None


def end_attributes(
    state: ModelRunState, outcome: CallOutcome, *, latest_names: bool = False
) -> dict[str, AttributeValue]:
    """The attributes a model-call span gets when the call ends (with ``latest_names``, the
    newest GenAI conventions' name of the cache writes)."""
    timing, response, split = outcome.timing, outcome.response, outcome.split
    estimated = outcome.estimated_tokens
    usage = response.usage
    prompt_tokens = usage.prompt_tokens
    optional: dict[str, AttributeValue | None] = {
        semconv.TTFT_MS: timing.ttft_ms,
        semconv.TTFT_LEVEL: timing.ttft_level,
        gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: timing.first_chunk_s,
        semconv.ESTIMATED_INPUT_TOKENS: estimated,
        gen_ai.GEN_AI_RESPONSE_MODEL: response.model,
        gen_ai.GEN_AI_RESPONSE_ID: response.id,
        gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: response.finish_reasons or None,
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: prompt_tokens,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.completion_tokens,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cached_tokens,
        (
            semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS
            if latest_names
            else gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
        ): usage.cache_creation_tokens,
        semconv.PREFILLED_INPUT_TOKENS: usage.prefilled_tokens,
        semconv.INPUT_TOKENS_RATIO: (
            prompt_tokens / estimated if prompt_tokens is not None and estimated else None
        ),
        semconv.INVALID_USAGE: usage.invalid or None,
    }
    if split is not None:
        optional[semconv.TTFT_SERVER_PREFILL_MS] = split.server_prefill_ms
        optional[semconv.TTFT_SERVER_DECODE_MS] = split.server_decode_ms
        optional[semconv.TTFT_REMAINDER_MS] = split.remainder_ms
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_REQUEST_STREAM: state.streamed,
        semconv.TOTAL_MS: timing.total_ms,
        semconv.CHUNKS: state.chunks,
        semconv.MAX_CHUNK_GAP_MS: state.max_gap_ns / 1e6,
        semconv.STALLS: state.stalls,
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})
    return attributes


def latency_record(state: ModelRunState, outcome: CallOutcome) -> LatencyRecord:
    """The record of a finished model call, for ``on_record`` and the log."""
    usage, split = outcome.usage, outcome.split
    return LatencyRecord(
        run_id=state.run_id,
        model=state.model or "unknown",
        streaming=state.streamed,
        ttft_ms=outcome.timing.ttft_ms,
        total_ms=outcome.timing.total_ms,
        chunks=state.chunks,
        stalls=state.stalls,
        max_chunk_gap_ms=state.max_gap_ns / 1e6,
        input_tokens=usage.prompt_tokens,
        estimated_input_tokens=outcome.estimated_tokens,
        output_tokens=usage.completion_tokens,
        ttft_level=outcome.timing.ttft_level,
        error_type=outcome.error_type,
        outcome=outcome.status,
        cache_read_tokens=usage.cached_tokens,
        prefilled_tokens=usage.prefilled_tokens,
        server_prefill_ms=None if split is None else split.server_prefill_ms,
        server_decode_ms=None if split is None else split.server_decode_ms,
        ttft_remainder_ms=None if split is None else split.remainder_ms,
    )


_SLOW_STREAMED = (
    "slow first token: %s took %.0f ms (threshold %.0f ms) with %s input tokens, %s. Hint: %s"
)
_NO_FIRST_TOKEN = (
    "no first token: %s ended %s after %.0f ms (threshold %.0f ms) without any content, with "
    "%s input tokens, %s; its first token would have come later still"
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
_HINT_BUFFERED = (
    "its {chunks} chunks arrived in one burst, {ttft:,.0f} of {total:,.0f} ms into the call: the "
    "client or a proxy buffers the stream, so the first token waited for the whole answer and "
    "the prompt is not the cause. Turn the buffering off (nginx `proxy_buffering off;` or the "
    "upstream header `X-Accel-Buffering: no`, no buffering middleware, a client that reads the "
    "stream as it arrives)."
)
_HINT_QUEUE = (
    "{split}: not the prompt, so trimming will not help; look at the server's load (queued "
    "requests, busy slots) and the network between client and server."
)
_HINT_UNSEEN = (
    "{split}: the server generated output before the first content chunk, a reasoning model's "
    "thinking (reasoning_content, which is no content to the stream) or a tool call it sends "
    "whole once complete (or a proxy held the stream back). Trimming will not shorten that "
    "part; less reasoning will (a lower reasoning effort, or thinking off)."
)
_HINT_PREFILL = (
    "{split}: lower prompt.token_budget or trim history so the server prefills less, or keep "
    "its prefix cache warm (an unchanged prefix is not prefilled again)."
)


def _hint(record: LatencyRecord, trim: PendingTrim | None, outcome: CallOutcome) -> str:
    split, cause, held_ms = outcome.split, outcome.cause, outcome.held_ms
    if cause is SlowCause.BUFFERED:
        return _HINT_BUFFERED.format(
            chunks=record.chunks, ttft=record.ttft_ms or 0.0, total=record.total_ms
        )
    if cause is SlowCause.UNSEEN_OUTPUT and split is not None and held_ms is not None:
        return _HINT_UNSEEN.format(split=split.describe(unseen_ms=held_ms))
    if cause is SlowCause.QUEUE_OR_NETWORK and split is not None:
        return _HINT_QUEUE.format(split=split.describe())
    fixed = None if trim is None else trim.attributes.get(semconv.TRIM_OVER_BUDGET_CAUSE)
    reason = None if trim is None else trim.attributes.get(semconv.TRIM_OVER_BUDGET_REASON)
    if isinstance(fixed, str) and fixed and reason == semconv.OVER_BUDGET_FIXED_PART:
        return _HINT_FIXED.format(cause=fixed)
    if cause is SlowCause.PREFILL and split is not None:
        return _HINT_PREFILL.format(split=split.describe())
    return _HINT_TRIM


def log_record(
    record: LatencyRecord, trim: PendingTrim | None, outcome: CallOutcome, *, every_request: bool
) -> None:
    """Logs a call: a WARNING or ERROR when its TTFT crossed ``outcome.threshold_ms`` (or it
    waited that long and failed without any content), INFO if ``every_request``. The hint of a
    slow streamed call follows what held it up: a buffered stream, output the server generated
    before the first content chunk, the client, network or queue, or the prefill (the trim, or
    the part no trim removes, when that alone is over the budget)."""
    tokens = (
        record.input_tokens if record.input_tokens is not None else record.estimated_input_tokens
    )
    shown_tokens = "unknown" if tokens is None else str(tokens)
    if record.cache_read_tokens is not None and record.input_tokens is not None:
        shown_tokens += f" ({record.cache_read_tokens} cached)"
    if record.ttft_level in ("warn", "error"):
        budget = f"trim budget {trim.budget}" if trim is not None else "no trim before it"
        level = logging.ERROR if record.ttft_level == "error" else logging.WARNING
        common = (record.model, record.ttft_ms, outcome.threshold_ms, shown_tokens, budget)
        if record.ttft_ms is None:
            waited = (record.model, record.outcome, record.total_ms, outcome.threshold_ms)
            logger.log(level, _NO_FIRST_TOKEN, *waited, shown_tokens, budget)
        elif record.streaming:
            logger.log(level, _SLOW_STREAMED, *common, _hint(record, trim, outcome))
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
