"""PriorityTrimmer as a LangChain Runnable: composition, run reporting and trace placement."""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.fakes import Recorder

from agent_latency.semconv import (
    GEN_AI_CONVERSATION_COMPACTED,
    TRIM_BUDGET,
    TRIM_DROPPED_MESSAGES,
    TRIM_OVER_BUDGET,
    TRIM_SHORTENED_MESSAGES,
    TRIM_SPAN_NAME,
    TRIM_TOKENS_AFTER,
    TRIM_TOKENS_BEFORE,
)
from agent_latency.telemetry import LatencyCallbackHandler
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
BUDGET = 120


def history(rounds: int = 8) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(rounds):
        messages += [HumanMessage(f"question {r} " + "data " * 30), AIMessage(f"answer {r}")]
    return messages


def conversation() -> list[BaseMessage]:
    return [SystemMessage("be brief"), *history(), HumanMessage("latest question")]


def fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.repeat(AIMessage("ok")))


class ContextProvider(BaseCallbackHandler):
    """Hands out a fixed OpenTelemetry context for every run, like the latency handler does."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.asked: list[UUID] = []

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        self.asked.append(run_id)
        return self.context


class FailingEvents(BaseCallbackHandler):
    raise_error = True

    def on_custom_event(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("handler bug")


def test_prompt_trimmer_model_sends_the_model_the_trimmed_messages() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "be brief"), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    recorder = Recorder()
    chain = prompt | PriorityTrimmer(BUDGET, token_counter=COUNTER) | fake_model()
    answer = chain.invoke(
        {"history": history(), "question": "latest question"}, {"callbacks": [recorder]}
    )
    assert answer.content == "ok"
    (sent,) = recorder.prompts
    assert COUNTER.count_messages(sent) <= BUDGET < COUNTER.count_messages(conversation())
    assert sent[0].content == "be brief" and sent[-1].content == "latest question"
    assert "PriorityTrimmer" in recorder.chains.values()


async def test_every_runnable_entry_point_gives_the_same_messages() -> None:
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    messages = conversation()
    expected = trimmer.trim(messages).messages
    assert trimmer.invoke(messages) == expected
    assert await trimmer.ainvoke(messages) == expected
    assert trimmer.batch([messages, {"messages": messages}]) == [expected, expected]
    assert await trimmer.abatch([messages]) == [expected]
    assert list(trimmer.stream(messages)) == [expected]
    assert [chunk async for chunk in trimmer.astream(messages)] == [expected]


def test_a_trim_outside_any_run_is_a_span_under_the_current_context(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    with tracer_provider.get_tracer("test").start_as_current_span("request") as request:
        outcome = trimmer.trim(conversation())
    trim_span, _ = span_exporter.get_finished_spans()
    assert trim_span.name == TRIM_SPAN_NAME
    assert trim_span.parent is not None
    assert trim_span.parent.span_id == request.get_span_context().span_id
    # and, the request being cut, the GenAI conventions' mark of a compacted conversation
    assert dict(trim_span.attributes or {}) == {
        **outcome.span_attributes(),
        GEN_AI_CONVERSATION_COMPACTED: True,
    }
    assert (
        outcome.span_attributes().items()
        >= {
            TRIM_TOKENS_BEFORE: outcome.tokens_before,
            TRIM_TOKENS_AFTER: outcome.tokens_after,
            TRIM_BUDGET: BUDGET,
            TRIM_DROPPED_MESSAGES: outcome.dropped_messages,
            TRIM_SHORTENED_MESSAGES: outcome.shortened_messages,
            TRIM_OVER_BUDGET: False,
        }.items()
    )


def test_a_failed_trim_ends_its_span_with_the_error_and_raises_it_unchanged(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    with pytest.raises(TypeError, match="Message 1"):
        trimmer.trim([HumanMessage("a"), 3])
    (span,) = span_exporter.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR


def test_inside_a_run_the_span_joins_the_runs_trace_and_the_result_is_reported(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    run_span = tracer_provider.get_tracer("test").start_span("agent run")
    provider = ContextProvider(trace.set_span_in_context(run_span))
    recorder = Recorder()
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    sent = trimmer.invoke(conversation(), {"callbacks": [provider, recorder]})
    run_span.end()
    (trimmer_run,) = [
        run_id for run_id, name in recorder.chains.items() if name == "PriorityTrimmer"
    ]
    assert provider.asked[0] == trimmer_run
    ((name, data, event_run),) = recorder.events
    assert (name, event_run) == (TRIM_SPAN_NAME, trimmer_run)  # the event is named as the span
    assert isinstance(data, TrimResult) and data.messages == sent
    trim_span = next(s for s in span_exporter.get_finished_spans() if s.name == TRIM_SPAN_NAME)
    assert trim_span.parent is not None
    assert trim_span.parent.span_id == run_span.get_span_context().span_id


async def test_async_runs_report_the_result_to_async_handlers_too(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    events: list[tuple[str, Any]] = []

    class AsyncRecorder(AsyncCallbackHandler):
        async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            events.append((name, data))

    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    sent = await trimmer.ainvoke(conversation(), {"callbacks": [AsyncRecorder()]})
    ((name, data),) = events
    assert name == TRIM_SPAN_NAME and data.messages == sent
    assert [s.name for s in span_exporter.get_finished_spans()] == [TRIM_SPAN_NAME]


async def test_a_failing_event_handler_does_not_fail_the_trim() -> None:
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    expected = trimmer.trim(conversation()).messages
    assert trimmer.invoke(conversation(), {"callbacks": [FailingEvents()]}) == expected
    assert await trimmer.ainvoke(conversation(), {"callbacks": [FailingEvents()]}) == expected


def test_with_the_latency_handler_the_trim_and_the_model_call_share_one_trace(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    chain = trimmer | fake_model()
    chain.invoke(conversation(), {"callbacks": [handler]})
    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    trim_span = spans[TRIM_SPAN_NAME]
    chat_span = next(s for name, s in spans.items() if name.startswith("chat"))
    assert trim_span.context.trace_id == chat_span.context.trace_id
    chat_attributes = dict(chat_span.attributes or {})
    assert chat_attributes[TRIM_TOKENS_AFTER] == dict(trim_span.attributes or {})[TRIM_TOKENS_AFTER]
    assert chat_attributes[TRIM_BUDGET] == BUDGET
    assert handler.open_runs == 0


class TrimTracer(BaseCallbackHandler):
    """A handler that offers the tracer trims run under it record with (TrimTracerProvider)."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider

    def tracer_for_trims(self) -> trace.Tracer:
        if self.provider is None:
            raise RuntimeError("handler bug")
        return self.provider.get_tracer("handler")


async def test_a_trim_under_a_handler_that_offers_a_tracer_records_with_it(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    # The handler's provider (e.g. configure_telemetry(set_global=False)'s), not the trimmer's.
    handlers = TracerProvider()
    handler_spans = InMemorySpanExporter()
    handlers.add_span_processor(SimpleSpanProcessor(handler_spans))
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)

    trimmer.invoke(conversation(), {"callbacks": [TrimTracer(handlers)]})
    await trimmer.ainvoke(conversation(), {"callbacks": [TrimTracer(handlers)]})

    assert [s.name for s in handler_spans.get_finished_spans()] == [TRIM_SPAN_NAME] * 2
    assert span_exporter.get_finished_spans() == ()
    # A handler whose tracer fails: the trim records with its own, and goes on.
    expected = trimmer.trim(conversation()).messages
    assert trimmer.invoke(conversation(), {"callbacks": [TrimTracer(None)]}) == expected
    assert len(span_exporter.get_finished_spans()) == 2


def test_trimmer_repr_names_its_options_and_no_content() -> None:
    text = repr(PriorityTrimmer(900, token_counter=COUNTER))
    assert text.startswith("PriorityTrimmer(budget=900,") and "prefix_step_tokens=225" in text
