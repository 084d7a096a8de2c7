"""The metric instruments of the handler, and what one finished model call records in them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from opentelemetry import metrics
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes

from agent_latency import semconv
from agent_latency.telemetry._record import CallOutcome
from agent_latency.telemetry._run_state import ModelRunState

_INPUT = gen_ai.GenAiTokenTypeValues.INPUT.value
_OUTPUT = gen_ai.GenAiTokenTypeValues.OUTPUT.value
_OPT_IN: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"
_LATEST_GENAI: Final = "gen_ai_latest_experimental"


def latest_genai_names(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` (a comma-separated list) in ``environ`` lists
    ``gen_ai_latest_experimental``: the newest GenAI names."""
    return _LATEST_GENAI in (value.strip() for value in environ.get(_OPT_IN, "").split(","))


class Instruments:
    """The GenAI client histograms and agent-latency's counters, made from one meter.

    Args:
        meter: The meter of the handler (instrumentation scope ``agent_latency``).
        latest_names: Whether the GenAI histograms take the newest conventions' names
            (``gen_ai.client.inference.*``) instead of the installed package's
            (``gen_ai.client.operation.*``).
    """

    def __init__(self, meter: metrics.Meter, *, latest_names: bool = False) -> None:
        def seconds(name: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS_S,
            )

        names = (
            (
                semconv.GEN_AI_CLIENT_INFERENCE_DURATION,
                semconv.GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK,
                semconv.GEN_AI_CLIENT_INFERENCE_TIME_PER_OUTPUT_CHUNK,
            )
            if latest_names
            else (
                gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
                gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
                gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
            )
        )
        self.duration = seconds(names[0], "GenAI operation duration.")
        self.time_to_first_chunk = seconds(
            names[1], "Time from the request to the first content chunk of a streamed call."
        )
        self.time_per_chunk = seconds(
            names[2], "Mean time between content chunks after the first, once per call."
        )
        self.token_usage = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=semconv.TOKEN_USAGE_BUCKETS,
        )
        self.cache_tokens = meter.create_histogram(
            semconv.CACHE_TOKENS_METRIC,
            unit="{token}",
            description="Prompt tokens the server read from its prefix cache or wrote to it.",
            explicit_bucket_boundaries_advisory=semconv.TOKEN_USAGE_BUCKETS,
        )
        self.server_prefill = seconds(
            semconv.TTFT_SERVER_PREFILL_METRIC,
            "The server's prefill time, as it reports it: its part of the time to first token.",
        )
        self.ttft_remainder = seconds(
            semconv.TTFT_REMAINDER_METRIC,
            "Time to first token less the server's prefill (and a blocking call's decode): "
            "client, network and queue.",
        )
        self.stalls = meter.create_counter(
            semconv.STALLS_METRIC,
            unit="{stall}",
            description="Waits between streamed chunks longer than chunk_timeout_ms.",
        )
        self.question_retention = meter.create_histogram(
            semconv.QUESTION_RETENTION_METRIC,
            unit="1",
            description="Share of the question's terms found in the input that the trim kept.",
            explicit_bucket_boundaries_advisory=(0.25, 0.5, 0.75, 0.9, 0.99, 1.0),
        )
        self.ttft_breaches = meter.create_counter(
            semconv.TTFT_BREACHES_METRIC,
            unit="{call}",
            description="Streamed model calls whose time to first token crossed a threshold.",
        )

    def record_call(self, state: ModelRunState, outcome: CallOutcome) -> None:
        """Records one finished model call with its low-cardinality attributes and its span's
        context (exemplars link to the trace); a blocking call is no TTFT breach."""
        attributes = state.metric_attributes
        if outcome.response.model is not None:
            attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = outcome.response.model
        if outcome.error_type is not None:
            attributes[error_attributes.ERROR_TYPE] = outcome.error_type
        context, timing, usage, split = state.context, outcome.timing, outcome.usage, outcome.split
        self.duration.record(timing.total_ms / 1e3, attributes, context)
        if timing.first_chunk_s is not None:
            self.time_to_first_chunk.record(timing.first_chunk_s, attributes, context)
        if timing.mean_chunk_gap_s is not None:
            # Once per call (the mean gap), not once per chunk: an SDK histogram record costs
            # several microseconds, more than the whole per-chunk budget of the handler.
            self.time_per_chunk.record(timing.mean_chunk_gap_s, attributes, context)
        token_type, cache = gen_ai.GEN_AI_TOKEN_TYPE, semconv.TOKEN_CACHE
        for histogram, key, value, tokens in (
            (self.token_usage, token_type, _INPUT, usage.prompt_tokens),
            (self.token_usage, token_type, _OUTPUT, usage.completion_tokens),
            (self.cache_tokens, cache, semconv.TOKEN_CACHE_READ, usage.cached_tokens),
            (self.cache_tokens, cache, semconv.TOKEN_CACHE_CREATION, usage.cache_creation_tokens),
        ):
            if tokens is not None:
                histogram.record(tokens, {**attributes, key: value}, context)
        if split is not None:
            self.server_prefill.record(split.server_prefill_ms / 1e3, attributes, context)
            self.ttft_remainder.record(split.remainder_ms / 1e3, attributes, context)
        if state.stalls:
            self.stalls.add(state.stalls, attributes, context)
        retention = (
            state.trim.attributes.get(semconv.TRIM_QUESTION_RETENTION) if state.trim else None
        )
        if isinstance(retention, float | int) and not isinstance(retention, bool):
            self.question_retention.record(retention, attributes, context)
        level = timing.ttft_level
        if state.streamed and level is not None and level != "ok":
            self.ttft_breaches.add(1, {**attributes, semconv.TTFT_LEVEL: level}, context)
