"""Prompt-cache and calibration telemetry: the server's usage fields on the chat span and metric.

The wire tests run the real ``ChatOpenAI`` (``build_chat_model``) against the simulator, whose
prefix cache reports ``usage.prompt_tokens_details.cached_tokens`` like vLLM and OpenAI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from support.simulators import settings_of

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    PriorityTrimmer,
    build_chat_model,
    semconv,
)
from agent_latency.sim import SimulatorConfig, running_simulator

CACHE_READ = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
CACHE_CREATION = gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
FAST = SimulatorConfig(overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=5000)


def conversation(question: str) -> list[BaseMessage]:
    """A long shared system prompt (the cacheable prefix), then a question."""
    return [
        SystemMessage("You are a careful assistant for the billing team. " * 40),
        HumanMessage(question),
    ]


def chat_spans(exporter: InMemorySpanExporter) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]


def usage_by_type(points: Callable[[str], list[Any]]) -> dict[str, float]:
    return {
        point.attributes[gen_ai.GEN_AI_TOKEN_TYPE]: point.sum
        for point in points("gen_ai.client.token.usage")
    }


def cache_tokens(points: Callable[[str], list[Any]]) -> dict[str, float]:
    return {
        point.attributes[semconv.TOKEN_CACHE]: point.sum
        for point in points(semconv.CACHE_TOKENS_METRIC)
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streamed"])
def test_cache_reads_reach_the_span_and_the_token_usage_metric_on_the_wire(
    streaming: bool,
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
) -> None:
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, meter_provider=meter_provider, on_record=records.append
    )
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        model = build_chat_model(settings, streaming=streaming, stream_usage=True)
        answers: list[AIMessage] = []
        for question in ("What is an invoice?", "And a credit note?"):
            messages = conversation(question)
            if streaming:
                merged: Any = None
                for chunk in model.stream(messages, config={"callbacks": [handler]}):
                    merged = chunk if merged is None else merged + chunk
                answers.append(merged)
            else:
                answers.append(model.invoke(messages, config={"callbacks": [handler]}))

    first, second = (span.attributes for span in chat_spans(span_exporter))
    # What LangChain mapped from the wire's prompt_tokens_details.cached_tokens, per call.
    reported = [answer.usage_metadata["input_token_details"]["cache_read"] for answer in answers]
    assert reported[0] == 0 and reported[1] > 0  # the second call reuses the system prompt
    assert [first[CACHE_READ], second[CACHE_READ]] == reported
    for attributes, cached in zip((first, second), reported, strict=True):
        assert attributes[gen_ai.GEN_AI_REQUEST_STREAM] is streaming
        prefilled = attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] - cached
        assert attributes[semconv.PREFILLED_INPUT_TOKENS] == prefilled
        assert CACHE_CREATION not in attributes  # the server reports no cache writes
    assert [record.cache_read_tokens for record in records] == reported

    usage = usage_by_type(metric_points)
    # The conventions' token types only: cache reads are part of input, never a type of their own.
    assert usage == {
        "input": first[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] + second[gen_ai.GEN_AI_USAGE_INPUT_TOKENS],
        "output": first[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS]
        + second[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS],
    }
    assert cache_tokens(metric_points) == {semconv.TOKEN_CACHE_READ: sum(reported)}


def test_no_cache_figures_where_the_server_says_nothing_about_caching(
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    answer = AIMessage(
        "fine", usage_metadata={"input_tokens": 40, "output_tokens": 2, "total_tokens": 42}
    )
    GenericFakeChatModel(messages=iter([answer])).invoke("hi", config={"callbacks": [handler]})

    (span,) = chat_spans(span_exporter)
    assert span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 40
    for absent in (CACHE_READ, CACHE_CREATION, semconv.PREFILLED_INPUT_TOKENS):
        assert absent not in span.attributes  # absent, not 0
    assert usage_by_type(metric_points) == {"input": 40, "output": 2}
    assert cache_tokens(metric_points) == {}


def end_call(handler: LatencyCallbackHandler, response: LLMResult) -> None:
    run_id = uuid4()
    handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
    handler.on_llm_end(response, run_id=run_id)


def test_deepseek_cache_hits_and_anthropic_style_cache_writes_are_mapped(
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    # DeepSeek, blocking: LangChain leaves prompt_cache_hit_tokens in the raw token_usage only.
    deepseek = LLMResult(
        generations=[[ChatGeneration(message=AIMessage("a"))]],
        llm_output={
            "token_usage": {
                "prompt_tokens": 900,
                "completion_tokens": 5,
                "prompt_cache_hit_tokens": 640,
                "prompt_cache_miss_tokens": 260,
            }
        },
    )
    # A provider reporting writes, with a service tier prefix on its reads.
    tiered = AIMessage(
        "b",
        usage_metadata={
            "input_tokens": 1000,
            "output_tokens": 3,
            "total_tokens": 1003,
            "input_token_details": {"priority_cache_read": 200, "cache_creation": 700},
        },
    )
    end_call(handler, deepseek)
    end_call(handler, LLMResult(generations=[[ChatGeneration(message=tiered)]]))

    first, second = (span.attributes for span in chat_spans(span_exporter))
    assert (first[CACHE_READ], first[semconv.PREFILLED_INPUT_TOKENS]) == (640, 260)
    assert CACHE_CREATION not in first
    assert (second[CACHE_READ], second[CACHE_CREATION]) == (200, 700)
    assert second[semconv.PREFILLED_INPUT_TOKENS] == 800
    assert cache_tokens(metric_points) == {
        semconv.TOKEN_CACHE_READ: 840,
        semconv.TOKEN_CACHE_CREATION: 700,
    }
    assert set(usage_by_type(metric_points)) == {"input", "output"}


# -- calibration: the server's count of a trimmed request goes back to the trim ----------------


@dataclass
class RecordingCalibration:
    """A calibration that keeps what it is told (``PromptCalibration.observe``'s signature)."""

    observed: list[tuple[int, int]] = field(default_factory=list)

    def observe(self, estimated: int, actual: int) -> None:
        self.observed.append((estimated, actual))


@dataclass
class Trim:
    """The fields of a ``TrimResult`` the handler reads."""

    tokens_before: int = 900
    tokens_after: int = 400
    budget: int = 500
    dropped_messages: int = 3
    shortened_messages: int = 0
    over_budget: bool = False
    calibration: Any = None
    model: str | None = None


def trimmed_call(
    handler: LatencyCallbackHandler, trim: Trim, answer: AIMessage, model: str = "m"
) -> None:
    chain, call = uuid4(), uuid4()
    handler.on_chain_start({"name": "seq"}, {}, run_id=chain)
    handler.on_custom_event(semconv.TRIM_SPAN_NAME, trim, run_id=chain)
    prompt = [[HumanMessage("hi")]]
    metadata = {"ls_model_name": model}
    handler.on_chat_model_start({}, prompt, run_id=call, parent_run_id=chain, metadata=metadata)
    handler.on_llm_end(LLMResult(generations=[[ChatGeneration(message=answer)]]), run_id=call)
    handler.on_chain_end({}, run_id=chain)


def usage(input_tokens: int) -> AIMessage:
    return AIMessage(
        "ok",
        usage_metadata={
            "input_tokens": input_tokens,
            "output_tokens": 1,
            "total_tokens": input_tokens + 1,
        },
    )


def test_the_servers_count_of_a_trimmed_call_feeds_the_calibration_and_the_span(
    tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    calibration = RecordingCalibration()
    trimmed_call(handler, Trim(calibration=calibration), usage(440))
    trimmed_call(handler, Trim(calibration=calibration), AIMessage("no usage reported"))

    assert calibration.observed == [(400, 440)]  # (our count of the request, the server's)
    first, second = (span.attributes for span in chat_spans(span_exporter))
    assert first[semconv.ESTIMATED_INPUT_TOKENS] == 400  # the trim's count of the whole request
    assert first[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 440
    assert first[semconv.INPUT_TOKENS_RATIO] == pytest.approx(1.1)
    assert semconv.INPUT_TOKENS_RATIO not in second
    assert handler.open_runs == 0


@pytest.mark.parametrize(("called", "taught"), [("gpt-4o", True), ("gpt-4o-mini", False)])
def test_only_a_call_to_the_model_the_trim_names_teaches_its_calibration(
    tracer_provider: Any, called: str, taught: bool
) -> None:
    """A fallback that takes the trimmed request (``ModelFallbackMiddleware`` after
    ``TrimmingMiddleware``, the primary failing before its call starts) counts in its own
    tokens: its count is no lesson for the primary's calibration."""
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    calibration = RecordingCalibration()
    trimmed_call(handler, Trim(calibration=calibration, model="gpt-4o"), usage(440), called)
    assert calibration.observed == ([(400, 440)] if taught else [])
    assert handler.open_runs == 0


def test_a_failing_calibration_is_logged_and_breaks_nothing(
    tracer_provider: Any, span_exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def observe(self, estimated: int, actual: int) -> None:
            raise ZeroDivisionError

    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        trimmed_call(handler, Trim(calibration=Broken()), usage(440))
        trimmed_call(handler, Trim(calibration="not a calibration"), usage(440))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "agent-latency: calibration failed with ZeroDivisionError; the run goes on without "
        "this telemetry (details at DEBUG level)"
    ]
    assert len(chat_spans(span_exporter)) == 2
    assert handler.open_runs == 0


def test_from_settings_trimmer_learns_the_servers_count_through_the_handler(
    tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    """No extra wiring: ``PriorityTrimmer.from_settings`` and the handler share the calibration
    of the (endpoint, model), and every trimmed call feeds it the server's count."""
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        trimmer = PriorityTrimmer.from_settings(settings)
        assert trimmer.options.calibration is not None
        chain = trimmer | build_chat_model(settings, streaming=True, stream_usage=True)
        for question in ("What is an invoice?", "And a credit note?", "And a refund?"):
            list(chain.stream(conversation(question), config={"callbacks": [handler]}))

    spans = chat_spans(span_exporter)
    assert trimmer.options.calibration.observations == len(spans) == 3
    for span in spans:
        ours = span.attributes[semconv.TRIM_TOKENS_AFTER]
        server = span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS]
        assert span.attributes[semconv.ESTIMATED_INPUT_TOKENS] == ours
        assert span.attributes[semconv.INPUT_TOKENS_RATIO] == pytest.approx(server / ours)
