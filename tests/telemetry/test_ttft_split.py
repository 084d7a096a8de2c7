"""Where the first token's time goes: the server's prefill, the rest, and the hint they choose.

On the wire the simulator answers like llama-server (its ``timings`` object: ``prompt_ms``,
``prompt_n``, ``cache_n``, ``predicted_ms``), ``build_chat_model``'s ChatOpenAI keeps it, and the
chat span splits the time to first token by it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from support.simulators import chat_openai_of, settings_of

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    build_chat_model,
    semconv,
)
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.telemetry import _model_call
from agent_latency.telemetry._split import split_ttft

OVERHEAD_MS = 40.0
PREFILL_BOUND = SimulatorConfig(
    overhead_ms=OVERHEAD_MS, prefill_ms_per_token=0.4, decode_tokens_per_s=400, answer_tokens=8
)
SPLIT = (
    semconv.TTFT_SERVER_PREFILL_MS,
    semconv.TTFT_SERVER_DECODE_MS,
    semconv.TTFT_REMAINDER_MS,
)


def conversation(question: str) -> list[BaseMessage]:
    """A long shared system prompt (the cacheable prefix), then a question."""
    return [
        SystemMessage("You answer questions about invoices, credit notes and refunds. " * 30),
        HumanMessage(question),
    ]


def chat_spans(exporter: InMemorySpanExporter) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]


def answer_of(model: Any, messages: list[BaseMessage], handler: Any, streaming: bool) -> Any:
    config: Any = {"callbacks": [handler]}
    if not streaming:
        return model.invoke(messages, config=config)
    merged: Any = None
    for chunk in model.stream(messages, config=config):
        merged = chunk if merged is None else merged + chunk
    return merged


@pytest.fixture
def recording(
    tracer_provider: Any, meter_provider: Any
) -> tuple[LatencyCallbackHandler, list[LatencyRecord]]:
    """A handler reporting to the test's providers, and the records it hands out."""
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, meter_provider=meter_provider, on_record=records.append
    )
    return handler, records


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "blocking"])
def test_the_chat_span_splits_the_first_token_by_the_servers_timings_on_the_wire(
    streaming: bool,
    recording: tuple[LatencyCallbackHandler, list[LatencyRecord]],
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
) -> None:
    handler, records = recording
    with running_simulator(PREFILL_BOUND) as sim:
        settings = settings_of(sim)
        model = build_chat_model(settings, streaming=streaming)
        answers = [
            answer_of(model, conversation(question), handler, streaming)
            for question in ("What is an invoice?", "And a credit note?")
        ]

    spans = chat_spans(span_exporter)
    assert len(spans) == len(records) == 2
    for answer, span, record in zip(answers, spans, records, strict=True):
        timings = answer.response_metadata["timings"]  # kept by build_chat_model's model
        attributes = span.attributes
        assert attributes[semconv.TTFT_SERVER_PREFILL_MS] == pytest.approx(timings["prompt_ms"])
        assert attributes[semconv.PREFILLED_INPUT_TOKENS] == timings["prompt_n"]
        assert attributes[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == timings["cache_n"]
        parts = attributes[semconv.TTFT_SERVER_PREFILL_MS] + attributes[semconv.TTFT_REMAINDER_MS]
        if streaming:
            assert semconv.TTFT_SERVER_DECODE_MS not in attributes
        else:  # a blocking call's first text waits for the server's whole decode
            decode = attributes[semconv.TTFT_SERVER_DECODE_MS]
            assert decode == pytest.approx(timings["predicted_ms"])
            parts += decode
        assert parts == pytest.approx(attributes[semconv.TTFT_MS], rel=0.05)
        # The simulator waits its overhead before prefilling: that is queue, not prefill.
        assert attributes[semconv.TTFT_REMAINDER_MS] >= 0.9 * OVERHEAD_MS
        assert (record.server_prefill_ms, record.ttft_remainder_ms) == (
            attributes[semconv.TTFT_SERVER_PREFILL_MS],
            attributes[semconv.TTFT_REMAINDER_MS],
        )
        assert record.prefilled_tokens == timings["prompt_n"]
    first, second = (span.attributes for span in spans)
    assert first[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 0
    assert second[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] > 0  # the system prompt, cached
    # The cold call prefilled the whole prompt, the warm one only what follows the cached prefix.
    assert second[semconv.TTFT_SERVER_PREFILL_MS] < first[semconv.TTFT_SERVER_PREFILL_MS]

    (prefill,) = metric_points(semconv.TTFT_SERVER_PREFILL_METRIC)
    (remainder,) = metric_points(semconv.TTFT_REMAINDER_METRIC)
    assert (prefill.count, remainder.count) == (2, 2)
    assert prefill.sum == pytest.approx(sum(r.server_prefill_ms or 0 for r in records) / 1e3)
    assert remainder.sum == pytest.approx(sum(r.ttft_remainder_ms or 0 for r in records) / 1e3)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "blocking"])
def test_a_plain_chatopenai_drops_the_timings_so_the_split_is_absent_not_wrong(
    streaming: bool,
    recording: tuple[LatencyCallbackHandler, list[LatencyRecord]],
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
) -> None:
    handler, records = recording
    with running_simulator(PREFILL_BOUND) as sim:
        model = chat_openai_of(sim, streaming=streaming, stream_usage=True)
        answer = answer_of(model, conversation("What is an invoice?"), handler, streaming)

    assert "timings" not in answer.response_metadata
    (span,) = chat_spans(span_exporter)
    for absent in SPLIT:
        assert absent not in span.attributes
    assert span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] > 0  # the usage still arrives
    (record,) = records
    assert (record.server_prefill_ms, record.server_decode_ms, record.ttft_remainder_ms) == (
        None,
        None,
        None,
    )
    assert metric_points(semconv.TTFT_SERVER_PREFILL_METRIC) == []
    assert metric_points(semconv.TTFT_REMAINDER_METRIC) == []


# -- the rule ---------------------------------------------------------------------------------


def test_the_split_believes_the_server_only_up_to_the_clients_own_wait() -> None:
    split = split_ttft(1000.0, prefill_ms=900.0, prefilled_tokens=1845, streamed=True)
    assert split is not None
    assert (split.server_prefill_ms, split.server_decode_ms, split.remainder_ms) == (900, None, 100)
    assert split.describe() == (
        "of 1,000 ms to the first token: 900 ms prefill of 1,845 uncached tokens, "
        "100 ms client, network and queue"
    )
    # Clocks and rounding: up to 5% over the client's wait leaves no remainder; more is not
    # believed (a server cannot prefill longer than the client waited for its first token).
    within = split_ttft(880.0, prefill_ms=900.0, streamed=True)
    assert within is not None and within.remainder_ms == 0
    assert split_ttft(850.0, prefill_ms=900.0, streamed=True) is None
    assert split_ttft(None, prefill_ms=900.0, streamed=True) is None
    assert split_ttft(1000.0, prefill_ms=None, streamed=True) is None
    # A blocking call's split needs the decode its first text waited for.
    assert split_ttft(1000.0, prefill_ms=600.0, streamed=False) is None
    blocking = split_ttft(1000.0, prefill_ms=600.0, decode_ms=300.0, streamed=False)
    assert blocking is not None
    assert (blocking.server_decode_ms, blocking.remainder_ms) == (300, 100)
    assert "300 ms decoding the answer" in blocking.describe()
    # A cached repeat prefills one token (doctor's probe: 883 of 884 cached).
    one = split_ttft(40.0, prefill_ms=3.0, prefilled_tokens=1, streamed=True)
    assert one is not None and "3 ms prefill of 1 uncached token," in one.describe()


# -- the hint of a slow first token follows the split -----------------------------------------


class Clock:
    """The handler's clock, moved by hand (nanoseconds)."""

    def __init__(self) -> None:
        self.now_ns = 0

    def advance(self, ms: float) -> None:
        self.now_ns += int(ms * 1_000_000)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(_model_call, "_now_ns", lambda: fake.now_ns)
    yield fake


def streamed_call(
    handler: LatencyCallbackHandler,
    clock: Clock,
    *,
    ttft_ms: float,
    chunk_gap_ms: float,
    timings: dict[str, Any] | None,
    chunks: int = 20,
    vllm: dict[str, Any] | None = None,
) -> None:
    run_id = uuid.uuid4()
    handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
    clock.advance(ttft_ms)
    for index in range(chunks):
        if index:
            clock.advance(chunk_gap_ms)
        handler.on_llm_new_token("word ", run_id=run_id)
    metadata = {} if timings is None else {"timings": timings}
    if vllm is not None:
        metadata["metrics"] = vllm
    answer = AIMessage(
        "word " * chunks,
        usage_metadata={"input_tokens": 1900, "output_tokens": chunks, "total_tokens": 1920},
        response_metadata=metadata,
    )
    handler.on_llm_end(LLMResult(generations=[[ChatGeneration(message=answer)]]), run_id=run_id)


def slow_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "slow first token" in r.getMessage()
    ]


def slow_hint(
    tracer_provider: Any,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
    *,
    ttft_ms: float,
    chunk_gap_ms: float,
    chunks: int = 20,
    prompt_ms: float | None = None,
    predicted_ms: float | None = None,
) -> str:
    """The hint of the one slow-first-token warning of a streamed call, after a prefill of
    1,845 uncached tokens in ``prompt_ms`` and ``predicted_ms`` of decoding, by llama-server's
    timings (none when ``prompt_ms`` is ``None``)."""
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, ttft_warn_ms=500, log_every_request=False
    )
    timings = (
        None
        if prompt_ms is None
        else {"cache_n": 0, "prompt_n": 1845, "prompt_ms": prompt_ms, "predicted_ms": predicted_ms}
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        streamed_call(
            handler,
            clock,
            ttft_ms=ttft_ms,
            chunk_gap_ms=chunk_gap_ms,
            timings=timings,
            chunks=chunks,
        )
    (message,) = slow_warnings(caplog)
    return message


@pytest.mark.parametrize(
    ("prompt_ms", "says", "never"),
    [
        (1310.0, ["1,310 ms prefill of 1,845 uncached tokens", "keep its prefix cache warm"], []),
        (
            200.0,
            ["200 ms prefill", "1,220 ms client, network and queue", "not the prompt"],
            ["token_budget"],
        ),
    ],
    ids=["prefill-bound", "queue-bound"],
)
def test_the_hint_names_the_larger_part_of_the_first_tokens_time(
    prompt_ms: float,
    says: list[str],
    never: list[str],
    clock: Clock,
    tracer_provider: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = slow_hint(
        tracer_provider,
        clock,
        caplog,
        ttft_ms=1420,
        chunk_gap_ms=20,
        prompt_ms=prompt_ms,
        predicted_ms=400.0,
    )
    assert "of 1,420 ms to the first token" in message
    for words in says:
        assert words in message
    for words in never:
        assert words not in message


def test_vllms_per_request_metrics_split_the_first_token_too(
    clock: Clock, tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    # vLLM's time_to_first_token_ms runs from scheduling (its queue excluded) to the first token.
    metrics = {"time_to_first_token_ms": 85.2, "generation_time_ms": 240.5, "queue_time_ms": 12.3}
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    streamed_call(handler, clock, ttft_ms=120, chunk_gap_ms=20, timings=None, vllm=metrics)
    (span,) = chat_spans(span_exporter)
    assert span.attributes[semconv.TTFT_SERVER_PREFILL_MS] == 85.2
    assert span.attributes[semconv.TTFT_REMAINDER_MS] == pytest.approx(120 - 85.2)
    assert semconv.TTFT_SERVER_DECODE_MS not in span.attributes


def test_without_the_servers_timings_the_hint_is_the_trim_one(
    clock: Clock, tracer_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    message = slow_hint(tracer_provider, clock, caplog, ttft_ms=1420, chunk_gap_ms=20)
    assert "lower prompt.token_budget" in message and "to the first token" not in message


def test_a_buffered_stream_is_named_not_blamed_on_the_prompt(
    clock: Clock, tracer_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A buffered stream from a real server: every chunk of a 508-token answer within 2 ms of
    # the first, 1,397 ms in.
    message = slow_hint(
        tracer_provider,
        clock,
        caplog,
        ttft_ms=1397,
        chunk_gap_ms=0.004,
        chunks=508,
        prompt_ms=300.0,
        predicted_ms=1000.0,
    )
    assert "508 chunks arrived in one burst" in message
    assert "the client or a proxy buffers the stream" in message
    assert "token_budget" not in message and "not the prompt" not in message


@pytest.mark.parametrize(
    ("chunk_gap_ms", "why"),
    [
        # 1,500 tokens/s (a small model on a GPU, a fast hosted API): 40 chunks 0.67 ms apart,
        # as long as the server says it decoded. Judged by the chunk gaps alone this was
        # "buffered, the prompt is not the cause".
        (0.67, "a fast server"),
        # A proxy buffered the 40-token answer decoded in 26 ms: 26 ms of the 1,420.
        (0.004, "a short buffer"),
    ],
    ids=["a fast server", "a short buffer"],
)
def test_a_prefill_bound_stream_gets_the_prefill_hint_even_when_its_chunks_come_fast(
    chunk_gap_ms: float,
    why: str,
    clock: Clock,
    tracer_provider: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = slow_hint(
        tracer_provider,
        clock,
        caplog,
        ttft_ms=1420,
        chunk_gap_ms=chunk_gap_ms,
        chunks=40,
        prompt_ms=1310.0,
        predicted_ms=26.0,
    )
    assert "1,310 ms prefill of 1,845 uncached tokens" in message, why
    assert "keep its prefix cache warm" in message
    assert "buffer" not in message


@pytest.mark.parametrize(
    ("chunks", "chunk_gap_ms", "ttft_ms"),
    [(20, 5.0, 959.0), (1, 0.0, 904.0)],
    ids=["reasoning before the answer", "a tool call sent whole"],
)
def test_output_generated_before_the_first_content_chunk_is_named_not_blamed_on_the_queue(
    chunks: int,
    chunk_gap_ms: float,
    ttft_ms: float,
    clock: Clock,
    tracer_provider: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # llama-server decoded for 900 ms after a 100 ms prefill, but the first content chunk came
    # only after most of it: a reasoning model's thinking (reasoning_content, which is no
    # content to LangChain) or a tool call the server sends once complete. That was logged as
    # "client, network and queue: not the prompt; look at the server's load", or as a buffer.
    message = slow_hint(
        tracer_provider,
        clock,
        caplog,
        ttft_ms=ttft_ms,
        chunk_gap_ms=chunk_gap_ms,
        chunks=chunks,
        prompt_ms=100.0,
        predicted_ms=900.0,
    )
    # What the server says it generated less what the client saw arrive, within the remainder.
    held = min(900 - chunk_gap_ms * (chunks - 1), ttft_ms - 100)
    assert f"100 ms prefill of 1,845 uncached tokens, {held:,.0f} ms generating before" in message
    assert f"{ttft_ms - 100 - held:,.0f} ms client, network and queue" in message
    assert "reasoning" in message and "tool call" in message
    assert "server's load" not in message and "buffers the stream" not in message


def test_a_fast_stream_on_the_wire_gets_the_prefill_hint_not_the_buffering_one(
    tracer_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fast = SimulatorConfig(
        overhead_ms=5,
        prefill_ms_per_token=1.0,
        decode_tokens_per_s=1500,
        answer_tokens=40,
        prefix_cache=False,
    )
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, ttft_warn_ms=100, log_every_request=False
    )
    with running_simulator(fast) as sim, caplog.at_level(logging.WARNING):
        settings = settings_of(sim)
        model = build_chat_model(settings)
        list(model.stream(conversation("What is an invoice?"), config={"callbacks": [handler]}))
    (message,) = slow_warnings(caplog)
    assert "keep its prefix cache warm" in message
    assert "buffer" not in message


def test_a_buffered_stream_on_the_wire_gets_the_buffering_hint(
    tracer_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    buffered = SimulatorConfig(
        overhead_ms=5,
        prefill_ms_per_token=0.01,
        decode_tokens_per_s=300,
        answer_tokens=60,
        buffered=True,  # holds every chunk until the answer is complete, like a buffering proxy
    )
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, ttft_warn_ms=50, log_every_request=False
    )
    with running_simulator(buffered) as sim, caplog.at_level(logging.WARNING):
        settings = settings_of(sim)
        list(build_chat_model(settings).stream("hello", config={"callbacks": [handler]}))
    (message,) = slow_warnings(caplog)
    assert "buffers the stream" in message
    assert "token_budget" not in message


def test_impossible_usage_is_named_on_the_span_and_teaches_nothing(
    tracer_provider: Any, span_exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    answer = AIMessage(
        "ok",
        usage_metadata={"input_tokens": -5, "output_tokens": 2, "total_tokens": -3},
        response_metadata={"timings": {"prompt_ms": -1.0, "prompt_n": 1e12, "cache_n": 3}},
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for _ in range(2):
            run_id = uuid.uuid4()
            handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
            handler.on_llm_end(
                LLMResult(generations=[[ChatGeneration(message=answer)]]), run_id=run_id
            )
    for span in chat_spans(span_exporter):
        attributes = span.attributes
        assert set(attributes[semconv.INVALID_USAGE]) == {
            "prompt_tokens",
            "prefill_ms",
            "prefill_tokens",
        }
        for absent in (gen_ai.GEN_AI_USAGE_INPUT_TOKENS, *SPLIT):
            assert absent not in attributes
        assert attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "impossible usage" in w]) == 1  # once per handler
