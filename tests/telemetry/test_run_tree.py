"""LatencyCallbackHandler: span trees of chains and agents, concurrency, trims, privacy."""

from __future__ import annotations

import asyncio
import logging
import random
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import SpanKind
from support.fakes import ToolCallingFake
from support.simulators import settings_of

from agent_latency import LatencyCallbackHandler, LatencyRecord, PriorityTrimmer, semconv
from agent_latency.semconv import TRIM_BUDGET, TRIM_SPAN_NAME, TRIM_TOKENS_AFTER
from agent_latency.trimming import TrimmingMiddleware

# The LangChain custom event that reports a trim has the trim span's name (docs/telemetry.md).
TRIM_EVENT = TRIM_SPAN_NAME

SECRET_TEXT = "zebra-umbrella-7731"


# What a TrimResult carries, as the handler reads it (by attribute, duck-typed).
TRIM_FIGURES = SimpleNamespace(
    tokens_before=900,
    tokens_after=500,
    budget=512,
    dropped_messages=4,
    shortened_messages=1,
    over_budget=False,
)


@pytest.fixture
def handler(tracer_provider: TracerProvider, meter_provider: Any) -> LatencyCallbackHandler:
    return LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)


def fake_model(count: int, content: str = "answer text") -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=content)] * count))


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_sequence_nests_under_the_callers_span_and_leaves_it_current(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    chain = RunnableLambda(lambda text: [HumanMessage(text)], name="to_messages") | fake_model(1)
    tracer = tracer_provider.get_tracer("web")
    with tracer.start_as_current_span("POST /chat") as request_span:
        chain.invoke("hi", config={"callbacks": [handler]})
        assert trace.get_current_span() is request_span

    spans = by_name(span_exporter.get_finished_spans())
    (request,) = spans["POST /chat"]
    (sequence,) = spans["chain RunnableSequence"]
    (step,) = spans["chain to_messages"]
    (chat,) = spans["chat"]
    assert parent_of(sequence) == request.context.span_id
    assert parent_of(step) == parent_of(chat) == sequence.context.span_id
    assert {span.context.trace_id for span in (sequence, step, chat)} == {request.context.trace_id}
    assert sequence.attributes[semconv.RUN_NAME] == "RunnableSequence"
    assert sequence.kind is SpanKind.INTERNAL
    assert handler.open_runs == 0


def test_create_agent_run_is_one_trace_of_agent_model_and_tool_spans(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    @tool
    def add(a: int, b: int = 2) -> int:
        """Adds two numbers."""
        return a + b

    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    content="", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]
                ),
                AIMessage(content="It is 3."),
            ]
        )
    )
    agent = create_agent(model, tools=[add], name="calculator")
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "1+2?"}]}, config={"callbacks": [handler]}
    )
    assert result["messages"][-1].content == "It is 3."

    finished = span_exporter.get_finished_spans()
    spans = by_name(finished)
    (agent_span,) = spans["invoke_agent calculator"]
    assert agent_span.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert agent_span.attributes[gen_ai.GEN_AI_AGENT_NAME] == "calculator"
    assert agent_span.parent is None
    assert {span.context.trace_id for span in finished} == {agent_span.context.trace_id}
    model_nodes = spans["chain model"]
    assert len(model_nodes) == 2
    assert all(parent_of(node) == agent_span.context.span_id for node in model_nodes)
    chats = spans["chat"]
    assert sorted(parent_of(chat) for chat in chats) == sorted(
        node.context.span_id for node in model_nodes
    )
    (tools_node,) = spans["chain tools"]
    (tool_span,) = spans["execute_tool add"]
    assert parent_of(tool_span) == tools_node.context.span_id
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_CALL_ID] == "c1"
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_NAME] == "add"
    assert gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS not in tool_span.attributes
    assert handler.open_runs == 0


async def test_concurrent_ainvokes_build_separate_correct_trees(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    class SlowFake(GenericFakeChatModel):
        streaming: bool = False

        async def _astream(self, *args: Any, **kwargs: Any) -> Any:
            async for chunk in super()._astream(*args, **kwargs):
                await asyncio.sleep(random.random() / 200)
                yield chunk

    model = SlowFake(messages=iter([AIMessage(content="a b c d")] * 100), streaming=True)
    chain = RunnableLambda(lambda text: [HumanMessage(text)], name="prep") | model
    tracer = tracer_provider.get_tracer("web")

    async def request(index: int) -> None:
        with tracer.start_as_current_span(f"request {index}"):
            await asyncio.sleep(random.random() / 100)
            await chain.ainvoke(f"question {index}", config={"callbacks": [handler]})

    await asyncio.gather(*(request(index) for index in range(100)))

    finished = span_exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in finished}
    requests = {span.context.span_id: span for span in finished if span.name.startswith("request")}
    chats = [span for span in finished if span.name == "chat"]
    assert len(requests) == 100 and len(chats) == 100
    covered = set()
    for chat in chats:
        sequence = by_id[parent_of(chat)]  # type: ignore[index]
        assert sequence.name == "chain RunnableSequence"
        request_span = requests[parent_of(sequence)]  # type: ignore[index]
        assert chat.context.trace_id == request_span.context.trace_id
        assert chat.attributes[semconv.CHUNKS] == 7
        covered.add(request_span.context.span_id)
    assert len(covered) == 100
    assert handler.open_runs == 0


def test_worker_threads_each_get_their_own_tree(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    model = fake_model(200)
    tracer = tracer_provider.get_tracer("worker")

    def job(index: int) -> None:
        with tracer.start_as_current_span(f"job {index}"):
            list(model.stream(f"question {index}", config={"callbacks": [handler]}))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(job, range(200)))

    finished = span_exporter.get_finished_spans()
    jobs = {span.context.span_id: span for span in finished if span.name.startswith("job")}
    chats = [span for span in finished if span.name == "chat"]
    assert len(chats) == 200
    assert {parent_of(chat) for chat in chats} == set(jobs)
    assert handler.open_runs == 0


def test_trim_figures_land_on_the_chat_span_the_trim_prepared(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    trimmer = PriorityTrimmer(budget=60, tracer_provider=tracer_provider)
    chain = trimmer | fake_model(2)
    history: list[BaseMessage] = [SystemMessage("Be brief.")]
    for turn in range(12):
        history += [HumanMessage(f"question {turn} " * 8), AIMessage(f"answer {turn} " * 8)]
    history.append(HumanMessage("last question"))

    chain.invoke(history, config={"callbacks": [handler]})
    chain.invoke([HumanMessage("short")], config={"callbacks": [handler]})

    spans = by_name(span_exporter.get_finished_spans())
    trims = spans[TRIM_SPAN_NAME]
    first_chat, second_chat = sorted(spans["chat"], key=lambda span: span.start_time or 0)
    assert first_chat.attributes[TRIM_BUDGET] == 60
    assert first_chat.attributes[TRIM_TOKENS_AFTER] == trims[0].attributes[TRIM_TOKENS_AFTER]
    assert second_chat.attributes[TRIM_BUDGET] == 60  # each call its own trim
    # The trim span joins the run's trace, under the trimmer's own run.
    trimmer_runs = spans["chain PriorityTrimmer"]
    assert {parent_of(span) for span in trims} == {run.context.span_id for run in trimmer_runs}
    assert handler.open_runs == 0


async def test_trim_reported_inside_the_model_scope_is_used_once(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    figures = TRIM_FIGURES

    async def trim_then_call(text: str) -> Any:
        await adispatch_custom_event(TRIM_EVENT, figures)
        first = await model.ainvoke(text)
        return first, await model.ainvoke(text)  # a second call: no trim prepared it

    model = fake_model(2)
    await RunnableLambda(trim_then_call).ainvoke("hi", config={"callbacks": [handler]})

    first, second = sorted(
        by_name(span_exporter.get_finished_spans())["chat"], key=lambda span: span.start_time or 0
    )
    assert first.attributes["agent_latency.trim.dropped_messages"] == 4
    assert first.attributes["agent_latency.trim.over_budget"] is False
    assert not any(key.startswith("agent_latency.trim.") for key in second.attributes)


def test_slow_call_warning_names_the_trim_budget(
    tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, ttft_warn_ms=1, ttft_error_ms=10_000
    )

    class SlowFake(GenericFakeChatModel):
        def _stream(self, *args: Any, **kwargs: Any) -> Any:
            import time

            time.sleep(0.005)
            yield from super()._stream(*args, **kwargs)

    def trim(messages: Any) -> Any:
        dispatch_custom_event(
            TRIM_EVENT,
            SimpleNamespace(
                tokens_before=10,
                tokens_after=8,
                budget=777,
                dropped_messages=1,
                shortened_messages=0,
                over_budget=False,
            ),
        )
        return messages

    chain = RunnableLambda(trim) | SlowFake(messages=iter([AIMessage(content="x y")]))
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        list(chain.stream([HumanMessage("hi")], config={"callbacks": [handler]}))
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "trim budget 777" in warning


def test_content_and_api_key_stay_out_unless_content_capture_is_on(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def everything_recorded() -> str:
        texts = []
        for span in span_exporter.get_finished_spans():
            texts.append(span.name)
            texts.extend(str(value) for value in (span.attributes or {}).values())
            for event in span.events:
                texts.append(event.name)
                texts.extend(str(value) for value in (event.attributes or {}).values())
            texts.append(str(span.status.description))
        texts.extend(record.getMessage() for record in caplog.records)
        return "\n".join(texts)

    messages = [SystemMessage(f"system {SECRET_TEXT}"), HumanMessage(f"user {SECRET_TEXT}")]
    with caplog.at_level(logging.DEBUG, logger="agent_latency"):
        quiet = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=True)
        fake_model(1, f"reply {SECRET_TEXT}").invoke(messages, config={"callbacks": [quiet]})
        with pytest.raises(ValueError):
            RunnableLambda(_fail_with_secret).invoke("x", config={"callbacks": [quiet]})
    assert SECRET_TEXT not in everything_recorded()

    span_exporter.clear()
    capturing = LatencyCallbackHandler(tracer_provider=tracer_provider, capture_content=True)
    fake_model(1, f"reply {SECRET_TEXT}").invoke(messages, config={"callbacks": [capturing]})
    (chat,) = span_exporter.get_finished_spans()
    assert SECRET_TEXT in str(chat.attributes[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert '"role": "system"' in str(chat.attributes[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert f"reply {SECRET_TEXT}" in str(chat.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES])


def _fail_with_secret(value: str) -> str:
    raise ValueError(f"bad input {SECRET_TEXT}")


def _contains_itself() -> list[object]:
    looped: list[object] = []
    looped.append(looped)
    return looped


@pytest.mark.parametrize(
    "value",
    [{(48.86, 2.35): "Paris"}, _contains_itself()],
    ids=["keys that are no strings", "a value that contains itself"],
)
def test_captured_tool_content_json_cannot_hold_still_ends_the_span_ok(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    value: object,
) -> None:
    # json.dumps(default=str) raises on both; the tool span was left open: a root one for good
    # (open_runs grew with every call), a nested one ended "abandoned" with its parent.
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, capture_content=True)

    @tool
    def locate(table: dict[str, Any] | list[Any]) -> object:
        """Returns what it is given."""
        return value

    argument = value if isinstance(value, list) else {"Paris": value}
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for _ in range(3):
            assert locate.invoke({"table": argument}, config={"callbacks": [handler]}) is value
        RunnableLambda(lambda _: locate.invoke({"table": argument})).invoke(
            "x", config={"callbacks": [handler]}
        )
    assert handler.open_runs == 0
    spans = [s for s in span_exporter.get_finished_spans() if s.name == "execute_tool locate"]
    assert len(spans) == 4
    for span in spans:
        assert span.attributes is not None
        assert span.attributes[semconv.OUTCOME] == "ok"
        assert gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS in span.attributes
        assert str(value) in str(span.attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT])
    assert not caplog.records


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_tool_result_that_cannot_be_recorded_still_ends_the_span(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, capture_content=True)
    result = _Unprintable()

    @tool
    def make(name: str) -> object:
        """Makes an object."""
        return result

    assert make.invoke({"name": "x"}, config={"callbacks": [handler]}) is result
    assert handler.open_runs == 0
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes[semconv.OUTCOME] == "ok"
    assert gen_ai.GEN_AI_TOOL_CALL_RESULT not in span.attributes


class _OpenSpanCounter(SpanProcessor):
    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


async def test_mixed_successes_errors_and_cancellations_leave_nothing_open() -> None:
    counter = _OpenSpanCounter()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(tracer_provider=provider, on_record=records.append)

    class Flaky(GenericFakeChatModel):
        streaming: bool = False

        async def _astream(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(messages[-1].content)
            async for chunk in super()._astream(messages, *args, **kwargs):
                await asyncio.sleep(0.001)
                if text == "fail":
                    raise RuntimeError("server error")
                yield chunk
                if text == "hang":
                    await asyncio.sleep(60)

    model = Flaky(messages=iter([AIMessage(content="one two three")] * 300), streaming=True)
    chain = RunnableLambda(lambda text: [HumanMessage(text)]) | model

    def start(text: str) -> asyncio.Task[Any]:
        return asyncio.create_task(chain.ainvoke(text, config={"callbacks": [handler]}))

    hanging = [start("hang") for _ in range(100)]
    finishing = [start(text) for text in ("ok", "fail") * 100]
    results = await asyncio.gather(*finishing, return_exceptions=True)
    async with asyncio.timeout(10):
        while handler.open_runs < 200:  # each hanging call: its sequence and its model call
            await asyncio.sleep(0.005)
    for task in hanging:
        task.cancel()
    cancelled = await asyncio.gather(*hanging, return_exceptions=True)
    await asyncio.sleep(0)

    assert sum(isinstance(result, RuntimeError) for result in results) == 100
    assert all(isinstance(result, asyncio.CancelledError) for result in cancelled)
    assert counter.started == counter.ended > 0
    assert handler.open_runs == 0
    assert Counter(record.outcome for record in records) == {
        "ok": 100,
        "error": 100,
        "cancelled": 100,
    }


def test_trimming_middleware_in_create_agent_marks_the_chat_span(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    trimmer = PriorityTrimmer(budget=80, tracer_provider=tracer_provider)
    model = ToolCallingFake(messages=iter([AIMessage(content="done")]))
    agent = create_agent(model, middleware=[TrimmingMiddleware(trimmer)], name="brief")
    history = [{"role": "user", "content": f"old question {turn} " * 10} for turn in range(10)]
    agent.invoke({"messages": history}, config={"callbacks": [handler]})

    spans = by_name(span_exporter.get_finished_spans())
    (chat,) = spans["chat"]
    (trim,) = spans[TRIM_SPAN_NAME]
    assert chat.attributes[TRIM_BUDGET] == 80
    assert chat.attributes[TRIM_TOKENS_AFTER] == trim.attributes[TRIM_TOKENS_AFTER]
    assert trim.context.trace_id == chat.context.trace_id
    assert handler.open_runs == 0


def test_pre_model_hook_trim_in_create_react_agent_marks_each_chat_span(
    handler: LatencyCallbackHandler,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    # The hook trims in the ``pre_model_hook`` node; the model runs in the sibling ``agent`` node.
    from langgraph.prebuilt import create_react_agent

    @tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return f"value of {key}"

    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "x"}, "id": "call_1"}])
    model = ToolCallingFake(messages=iter([call, AIMessage("done")]))
    trimmer = PriorityTrimmer(budget=80, tracer_provider=tracer_provider)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(model, [lookup], pre_model_hook=trimmer.as_pre_model_hook())
    history = [HumanMessage(f"old question {turn} " * 10) for turn in range(10)]
    agent.invoke({"messages": history}, config={"callbacks": [handler]})

    spans = by_name(span_exporter.get_finished_spans())
    chats = sorted(spans["chat"], key=lambda span: span.start_time or 0)
    trims = sorted(spans[TRIM_SPAN_NAME], key=lambda span: span.start_time or 0)
    assert len(chats) == len(trims) == 2
    for chat, trim in zip(chats, trims, strict=True):
        assert chat.attributes[TRIM_BUDGET] == 80
        assert chat.attributes[TRIM_TOKENS_AFTER] == trim.attributes[TRIM_TOKENS_AFTER]
    assert handler.open_runs == 0


def test_a_trim_whose_run_failed_is_not_handed_on(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    figures = TRIM_FIGURES

    def trim_then_fail(text: str) -> str:
        dispatch_custom_event(TRIM_EVENT, figures)
        raise ValueError("the trimmed messages never reach the model")

    failing_step = RunnableLambda(trim_then_fail).with_fallbacks([RunnableLambda(str)])
    chain = failing_step | fake_model(1)
    chain.invoke("hi", config={"callbacks": [handler]})

    (chat,) = by_name(span_exporter.get_finished_spans())["chat"]
    assert not any(key.startswith("agent_latency.trim.") for key in chat.attributes or {})
    assert handler.open_runs == 0


@pytest.mark.parametrize("attached", ["model and call", "chain and call", "twice in one list"])
def test_a_handler_attached_twice_traces_each_run_once(
    attached: str,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # LangChain delivers every callback once per listing, so the second start of each run
    # pushed the first out: an extra 'abandoned' span and record, a warning about a stream
    # kept open, and every chunk counted twice (half the real gap between chunks).
    from agent_latency import build_chat_model
    from agent_latency.sim import SimulatorConfig, running_simulator

    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, on_record=records.append, log_every_request=False
    )
    sim_config = SimulatorConfig(overhead_ms=5, decode_tokens_per_s=500, answer_tokens=6)
    with running_simulator(sim_config) as sim, caplog.at_level(logging.WARNING):
        settings = settings_of(sim)
        model = build_chat_model(settings, streaming=True)
        chain = RunnableLambda(lambda messages: messages, name="prepare") | model
        runnable, callbacks = {
            "model and call": (model.with_config(callbacks=[handler]), [handler]),
            "chain and call": (chain.with_config(callbacks=[handler]), [handler]),
            "twice in one list": (chain, [handler, handler]),
        }[attached]
        runnable.invoke([HumanMessage("hi")], config={"callbacks": callbacks})

    spans = span_exporter.get_finished_spans()
    names = Counter(span.name for span in spans)
    assert names[f"chat {sim.config.models[0]}"] == 1
    assert all(count == 1 for count in names.values()), names
    assert {span.attributes[semconv.OUTCOME] for span in spans} == {"ok"}
    (record,) = records
    assert (record.outcome, record.chunks) == ("ok", 6)
    assert handler.open_runs == 0
    assert not [r for r in caplog.records if "without an end callback" in r.getMessage()]
