"""Trimming inside agents: TrimmingMiddleware for create_agent, and the LangGraph pre-model hook."""

from __future__ import annotations

import itertools
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.fakes import Recorder, ToolCallingFake
from support.source_imports import imported_top_level_modules

import agent_latency
from agent_latency import (
    LatencyCallbackHandler,
)
from agent_latency.semconv import TRIM_BUDGET, TRIM_SPAN_NAME, TRIM_TOKENS_AFTER
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import TOOL_DEFINITION
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
BUDGET = 400
SYSTEM_PROMPT = "You answer from the lookup tool. " * 10


def scripted_model() -> ToolCallingFake:
    """Asks for one lookup, then answers; again and again."""
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "x"}, "id": "call_1"}])
    return ToolCallingFake(messages=itertools.cycle([call, AIMessage("done")]))


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}: " + "record " * 2000


def long_history() -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(10):
        messages += [HumanMessage(f"question {r} " + "data " * 40), AIMessage(f"answer {r}")]
    return [*messages, HumanMessage("latest question")]


def agent(trimmer: PriorityTrimmer) -> Any:
    return create_agent(
        scripted_model(),
        tools=[lookup],
        system_prompt=SYSTEM_PROMPT,
        middleware=[TrimmingMiddleware(trimmer)],
    )


def check_run(recorder: Recorder, state: dict[str, Any], history: list[BaseMessage]) -> None:
    """The model saw trimmed prompts within budget; the state kept everything untouched."""
    assert len(recorder.prompts) == 2 and len(recorder.trims) == 2
    for prompt, trim in zip(recorder.prompts, recorder.trims, strict=True):
        # The whole request counts: the messages and the recall and lookup tools' definitions.
        assert trim.tool_tokens == COUNTER.count_tools([TOOL_DEFINITION, lookup]) > 0
        assert COUNTER.count_messages(prompt) + trim.tool_tokens == trim.tokens_after <= BUDGET
        assert prompt[0].content == SYSTEM_PROMPT  # the system prompt is counted and kept
        assert prompt[0].type == "system" and trim.changed
    assert recorder.prompts[0][-1].content == "latest question"
    assert recorder.prompts[1][-1].type == "tool"  # the lookup result, shortened
    assert "tokens removed" in recorder.prompts[1][-1].text
    messages = state["messages"]
    assert messages[: len(history)] == history
    assert [m.type for m in messages[len(history) :]] == ["ai", "tool", "ai"]
    assert "tokens removed" not in messages[-2].text  # the stored result is whole


def test_create_agent_sends_trimmed_requests_and_keeps_the_full_history() -> None:
    recorder = Recorder()
    history = long_history()
    state = agent(PriorityTrimmer(BUDGET, token_counter=COUNTER)).invoke(
        {"messages": history}, {"callbacks": [recorder]}
    )
    check_run(recorder, state, history)


async def test_create_agent_async_sends_trimmed_requests_and_keeps_the_full_history() -> None:
    recorder = Recorder()
    history = long_history()
    state = await agent(PriorityTrimmer(BUDGET, token_counter=COUNTER)).ainvoke(
        {"messages": history}, {"callbacks": [recorder]}
    )
    check_run(recorder, state, history)


def test_in_an_agent_run_the_trim_span_and_the_chat_span_share_the_trace(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    agent(trimmer).invoke({"messages": long_history()}, {"callbacks": [handler]})
    spans = span_exporter.get_finished_spans()
    trims = [s for s in spans if s.name == TRIM_SPAN_NAME]
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(trims) == len(chats) == 2
    assert len({s.context.trace_id for s in spans}) == 1
    for trim_span, chat_span in zip(trims, chats, strict=True):
        assert trim_span.parent is not None and trim_span.parent == chat_span.parent
        assert chat_span.attributes is not None and trim_span.attributes is not None
        assert chat_span.attributes[TRIM_TOKENS_AFTER] == trim_span.attributes[TRIM_TOKENS_AFTER]
        assert chat_span.attributes[TRIM_BUDGET] == BUDGET
    assert handler.open_runs == 0


def request(messages: list[BaseMessage], system: str | None = "rules") -> ModelRequest[Any]:
    return ModelRequest(
        model=scripted_model(),
        messages=messages,  # type: ignore[arg-type]
        system_message=SystemMessage(system) if system is not None else None,
    )


def sent_by(middleware: TrimmingMiddleware, original: ModelRequest[Any]) -> ModelRequest[Any]:
    """Calls the middleware outside any agent run and returns the request the model got."""
    received: list[ModelRequest[Any]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        received.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    middleware.wrap_model_call(original, handler)
    return received[0]


def test_a_request_that_fits_is_passed_on_as_is() -> None:
    original = request([HumanMessage("hi")])
    assert sent_by(TrimmingMiddleware(PriorityTrimmer(BUDGET)), original) is original


def test_outside_an_agent_run_the_middleware_still_trims() -> None:
    original = request(long_history())
    sent = sent_by(TrimmingMiddleware(PriorityTrimmer(BUDGET, token_counter=COUNTER)), original)
    assert sent.system_message is original.system_message
    assert COUNTER.count_messages([sent.system_message, *sent.messages]) <= BUDGET  # type: ignore[list-item]
    assert len(original.messages) == 21  # the original request is untouched


def test_a_system_message_the_trimmer_may_drop_can_leave_the_request() -> None:
    trimmer = PriorityTrimmer(
        60,
        token_counter=COUNTER,
        keep_system=False,
        priority_order=("latest_user", "history", "tool_result", "system"),
    )
    sent = sent_by(TrimmingMiddleware(trimmer), request(long_history(), system="rule " * 100))
    assert sent.system_message is None
    assert sent.messages[-1].content == "latest question"


def test_a_trimmer_failure_sends_the_request_untrimmed_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BrokenTrimmer(PriorityTrimmer):
        def trim(self, messages: object, **kwargs: Any) -> TrimResult:
            raise RuntimeError("bug")

    original = request(long_history())
    with caplog.at_level(logging.ERROR, logger="agent_latency"):
        assert sent_by(TrimmingMiddleware(BrokenTrimmer(BUDGET)), original) is original
    assert "sent untrimmed" in caplog.text


def test_the_middleware_needs_a_priority_trimmer() -> None:
    with pytest.raises(TypeError, match="trimmer must be a PriorityTrimmer"):
        TrimmingMiddleware(6000)  # type: ignore[arg-type]


def test_the_langgraph_pre_model_hook_trims_llm_input_and_keeps_the_state() -> None:
    from langgraph.prebuilt import create_react_agent

    recorder = Recorder()
    history = long_history()
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # create_react_agent is deprecated in favour of create_agent
        graph = create_react_agent(
            scripted_model(), [lookup], pre_model_hook=trimmer.as_pre_model_hook()
        )
    state = graph.invoke({"messages": history}, {"callbacks": [recorder]})
    assert len(recorder.prompts) == 2
    assert all(COUNTER.count_messages(p) <= BUDGET for p in recorder.prompts)
    assert recorder.prompts[0][-1].content == "latest question"
    assert len(state["messages"]) == len(history) + 3
    assert len(recorder.trims) == 2


def test_the_pre_model_hook_reads_attribute_states_too() -> None:
    class State:
        def __init__(self, messages: list[BaseMessage]) -> None:
            self.messages = messages

    state = State(long_history())
    hook = PriorityTrimmer(BUDGET, token_counter=COUNTER).as_pre_model_hook()
    trimmed = hook(state)["llm_input_messages"]
    assert COUNTER.count_messages(trimmed) <= BUDGET


def test_the_trimmer_modules_do_not_import_the_optional_agent_frameworks() -> None:
    # Importing agent_latency itself is checked in test_public_api; this covers the trimmer's
    # own modules statically (all but the middleware), without a fresh interpreter's seconds.
    package = Path(agent_latency.__file__).parent
    modules = [p for p in (package / "trimming").glob("*.py") if p.name != "_middleware.py"]
    assert len(modules) > 10
    for path in (*modules, package / "_trace_link.py"):
        imported = imported_top_level_modules(path)
        assert imported.isdisjoint({"langchain", "langgraph"}), path.name


def test_in_an_agent_the_trim_span_goes_where_the_handler_records(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    # The trimmer has no tracer provider of its own (the global one records nothing here):
    # the handler's tracer records the trim beside its chat span.
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    graph = create_agent(
        scripted_model(),
        tools=[lookup],
        system_prompt=SYSTEM_PROMPT,
        middleware=[TrimmingMiddleware(trimmer)],
    )
    graph.invoke({"messages": long_history()}, {"callbacks": [handler]})
    spans = span_exporter.get_finished_spans()
    trims = [s for s in spans if s.name == TRIM_SPAN_NAME]
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(trims) == len(chats) == 2
    assert all(
        t.parent is not None and t.parent == c.parent for t, c in zip(trims, chats, strict=True)
    )


def test_a_state_record_of_the_removed_cost_aware_mode_is_not_read() -> None:
    """A checkpointer may still hold the removed mode's record (once read with counts up to
    10**8, allocating gigabytes): nothing reads it now, whatever it holds."""
    import tracemalloc

    record = {"actions": [["kept", 10**8]], "fingerprints": ["x" * 64], "prompt_tokens": 10**9}
    messages = request(long_history())
    state = {"messages": messages.messages, "agent_latency_latest_call": record}
    original = messages.override(state=state)
    tracemalloc.start()
    try:
        sent = sent_by(TrimmingMiddleware(PriorityTrimmer(BUDGET)), original)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(sent.messages) < len(original.messages)
    assert peak < 64 * 1024 * 1024
