"""The metric instruments of the handler, and what one finished model call records in them."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import metrics
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency.telemetry._langchain import Response
from agent_latency.telemetry._timing import CallTiming

_INPUT = gen_ai.GenAiTokenTypeValues.INPUT.value
_OUTPUT = gen_ai.GenAiTokenTypeValues.OUTPUT.value


class Instruments:
    """The GenAI client histograms and agent-latency's counters, made from one meter.

    Args:
        meter: The meter of the handler (instrumentation scope ``agent_latency``).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        def seconds(name: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS_S,
            )

        self.duration = seconds(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, "GenAI operation duration."
        )
        self.time_to_first_chunk = seconds(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
            "Time from the request to the first content chunk of a streamed call.",
        )
        self.time_per_chunk = seconds(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
            "Mean time between content chunks after the first, once per call.",
        )
        self.token_usage = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=semconv.TOKEN_USAGE_BUCKETS,
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

    def record_call(
        self,
        attributes: Mapping[str, AttributeValue],
        context: Context,
        *,
        timing: CallTiming,
        usage: Response,
        stalls: int,
        streamed: bool,
        question_retention: AttributeValue | None = None,
    ) -> None:
        """Records one finished model call.

        Args:
            attributes: The call's low-cardinality metric attributes.
            context: The call's span context (so exemplars link to the trace).
            timing: The call's timing.
            usage: The server's token counts.
            stalls: Stalls between chunks.
            streamed: Whether the call streamed; a blocking call is no TTFT breach, since its
                first text is its whole answer.
            question_retention: The retention proxy of the trim that prepared the call.
        """
        self.duration.record(timing.total_ms / 1e3, attributes, context)
        if timing.first_chunk_s is not None:
            self.time_to_first_chunk.record(timing.first_chunk_s, attributes, context)
        if timing.mean_chunk_gap_s is not None:
            # Once per call (the mean gap), not once per chunk: an SDK histogram record costs
            # several microseconds, more than the whole per-chunk budget of the handler.
            self.time_per_chunk.record(timing.mean_chunk_gap_s, attributes, context)
        for token_type, tokens in (
            (_INPUT, usage.input_tokens),
            (_OUTPUT, usage.output_tokens),
            (semconv.TOKEN_TYPE_CACHE_READ, usage.cache_read_tokens),
            (semconv.TOKEN_TYPE_CACHE_CREATION, usage.cache_creation_tokens),
        ):
            if tokens is not None:
                self.token_usage.record(
                    tokens, {**attributes, gen_ai.GEN_AI_TOKEN_TYPE: token_type}, context
                )
        if stalls:
            self.stalls.add(stalls, attributes, context)
        if isinstance(question_retention, float | int) and not isinstance(question_retention, bool):
            self.question_retention.record(question_retention, attributes, context)
        level = timing.ttft_level
        if streamed and level is not None and level != "ok":
            self.ttft_breaches.add(1, {**attributes, semconv.TTFT_LEVEL: level}, context)
