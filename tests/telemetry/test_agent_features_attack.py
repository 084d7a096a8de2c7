"""Attacks on the callback handler with LangChain v1 agent features users combine with
``TrimmingMiddleware``: LangChain's own middleware around ours, over HTTP to the simulator.

Defect found: a middleware after ours in ``middleware=[...]`` (inner: it runs after the trim)
that changes the request, such as ``ContextEditingMiddleware`` clearing old tool results or a
``wrap_model_call`` choosing the tools of each call, made the server's count of the request it
sent teach the calibration as if it were the count of the trimmed request; the learnt factor
(0.76 and 0.62 here) then raised every later trim's budget, and calls with nothing left to clear
went out above the budget by the server's count.

Defect found: nothing told the user that a middleware listed after ours changed what was sent.
``TodoListMiddleware`` after ``TrimmingMiddleware`` adds its system prompt to every call after
the trim: each went out ~280 tokens above the budget, silently. The handler now says so once,
with the fix (list ``TrimmingMiddleware`` last).

Defect found: ``ModelFallbackMiddleware`` listed before ``TrimmingMiddleware`` (ours last, as
advised) calls ours again for its fallback each time the primary fails, and that trim, made with
the primary's calibration, was paired with the fallback's count in its own model's tokens: six
calls taught the primary's calibration a factor of 1.065. Now the trim names the agent's model
(``TrimResult.model``) and only a call to it teaches.

What held is pinned too: an agent whose tool runs another agent (both trimmed by one trimmer),
streamed in messages mode with subgraphs and run as an ``abatch`` of threads: every model call's
span carries the figures of its own trim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelFallbackMiddleware,
    ModelRequest,
    ModelResponse,
    TodoListMiddleware,
    wrap_model_call,
)
from langchain.agents.structured_output import StructuredOutputValidationError
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from pydantic import BaseModel
from support.fakes import Recorder
from support.simulators import QUICK, settings_of

from agent_latency import (
    LatencyCallbackHandler,
    PriorityTrimmer,
    TrimmingMiddleware,
    build_chat_model,
    semconv,
)
from agent_latency.sim import RunningSimulator, running_simulator
from agent_latency.tokens import PromptCalibration

BUDGET = 1_500


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 60


def shelf_tool(number: int) -> Any:
    def shelf(key: str) -> str:
        return f"shelf {number}: {key}"

    description = f"Reads shelf {number} of the inventory for a key and reports its details. "
    return tool(f"shelf_{number}", description=description * 2)(shelf)


def test_a_request_another_middleware_changed_after_the_trim_teaches_the_calibration_nothing(
    sim: RunningSimulator, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    settings = settings_of(sim)
    calibration = PromptCalibration()  # the simulator counts in the model's own tokens
    trimmer = PriorityTrimmer.from_settings(
        settings, budget=BUDGET, calibration=calibration, prefix_stable=False
    )
    clearing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=400, keep=1)])
    agent = create_agent(
        build_chat_model(settings),
        tools=[lookup],
        system_prompt="Be brief. " * 20,
        middleware=[TrimmingMiddleware(trimmer, recall=False), clearing],
    )
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    calls = Recorder()
    messages: list[object] = []
    for turn in range(18):
        messages = [*messages, HumanMessage(f'Use lookup for "k{turn}" please. ' + "pad " * 30)]
        messages = agent.invoke({"messages": messages}, {"callbacks": [handler, calls]})["messages"]

    cleared = [
        (trim.tokens_after, server)
        for trim, server in zip(calls.trims, calls.server_tokens, strict=True)
        if server < trim.tokens_after
    ]
    assert cleared  # the attack happened: requests were sent smaller than trimmed
    # Our count is the server's (same tokenizer): only requests sent as trimmed teach it.
    factor = calibration.factor  # asserted below, after its consequence
    changed = 0
    for span in span_exporter.get_finished_spans():
        attributes = span.attributes or {}
        if (
            attributes.get(semconv.TRIM_TOKENS_AFTER, 0)
            > attributes.get(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, 0)
            > 0
        ):
            # Sent smaller than trimmed: the trim's count is not that of the request sent.
            changed += 1
            assert (
                attributes[semconv.ESTIMATED_INPUT_TOKENS] < attributes[semconv.TRIM_TOKENS_AFTER]
            )
    assert changed == len(cleared)

    # Another agent of the service on the same endpoint (from_settings shares the calibration)
    # and a long chat: nothing to clear, each request is sent as trimmed.
    chat = create_agent(
        build_chat_model(settings), middleware=[TrimmingMiddleware(trimmer, recall=False)]
    )
    chatted = Recorder()
    messages = []
    for turn in range(14):
        messages = [*messages, HumanMessage(f"Tell me about topic {turn}. " + "words " * 150)]
        messages = chat.invoke({"messages": messages}, {"callbacks": [handler, chatted]})[
            "messages"
        ]
    assert max(chatted.server_tokens) <= BUDGET
    assert factor == 1.0
    assert handler.open_runs == 0


def test_a_call_sent_with_fewer_tools_than_the_trim_counted_teaches_the_calibration_nothing(
    sim: RunningSimulator, tracer_provider: TracerProvider
) -> None:
    # LangChain's dynamic tools: a wrap_model_call that sends each call a few of the tools.
    @wrap_model_call
    def three_tools(
        request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(request.override(tools=request.tools[:3]))

    settings = settings_of(sim)
    calibration = PromptCalibration()
    trimmer = PriorityTrimmer.from_settings(settings, budget=BUDGET, calibration=calibration)
    agent = create_agent(
        build_chat_model(settings),
        tools=[shelf_tool(n) for n in range(12)],
        middleware=[TrimmingMiddleware(trimmer, recall=False), three_tools],
    )
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    calls = Recorder()
    messages: list[object] = []
    for _ in range(3):
        messages = [*messages, HumanMessage("hello " * 100)]
        messages = agent.invoke({"messages": messages}, {"callbacks": [handler, calls]})["messages"]

    sent = zip(calls.trims, calls.server_tokens, strict=True)
    assert all(server < trim.tokens_after for trim, server in sent)  # 3 tools of 12 counted
    assert calibration.observations == 0
    assert calibration.factor == 1.0


@pytest.mark.parametrize("ours_last", [True, False], ids=["ours last", "ours first"])
def test_a_fallback_models_count_teaches_the_primarys_calibration_nothing(
    tracer_provider: TracerProvider, ours_last: bool
) -> None:
    # The primary is down: ModelFallbackMiddleware answers each call with a model of another
    # server, which counts in Llama 3's tokens. Listed before ours (ours last, as advised), it
    # calls ours again with the fallback, and the trim made with the primary's calibration was
    # paired with the fallback's count. Listed after ours, the primary's failed call takes the
    # trim: nothing to teach either way.
    down = dataclasses.replace(QUICK, error_rate=1.0)
    llama = dataclasses.replace(QUICK, model="llama-3.1-8b", tokenizer="llama3")
    with running_simulator(down) as primary_server, running_simulator(llama) as fallback_server:
        settings = settings_of(primary_server)
        calibration = PromptCalibration()
        trimmer = PriorityTrimmer.from_settings(settings, budget=BUDGET, calibration=calibration)
        fallback = ModelFallbackMiddleware(
            build_chat_model(settings_of(fallback_server), max_retries=0)
        )
        ours = TrimmingMiddleware(trimmer)
        agent = create_agent(
            build_chat_model(settings, max_retries=0),
            tools=[lookup],
            middleware=[fallback, ours] if ours_last else [ours, fallback],
        )
        handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
        calls = Recorder()
        messages: list[object] = []
        for turn in range(3):
            messages = [*messages, HumanMessage(f'Use lookup for "k{turn}". ' + "pad " * 60)]
            messages = agent.invoke({"messages": messages}, {"callbacks": [handler, calls]})[
                "messages"
            ]

    answered = len(calls.server_tokens)
    assert answered == 6  # two calls a turn, each answered by the fallback
    assert len(calls.trims) == (2 * answered if ours_last else answered)
    # What would have been learnt: the fallback's server counts other tokens than ours.
    assert {trim.tokens_after for trim in calls.trims}.isdisjoint(calls.server_tokens)
    assert calibration.observations == 0
    assert calibration.factor == 1.0
    assert handler.open_runs == 0


class Answer(BaseModel):
    """The answer to the question."""

    text: str


def test_structured_output_counted_as_a_tool_and_sent_as_a_response_format_still_teaches(
    tracer_provider: TracerProvider,
) -> None:
    # A bare schema is an AutoStrategy: the middleware counts it as a tool, create_agent sends
    # it as a response_format to a model that takes one (gpt-4o): as many schemas either way.
    with running_simulator(dataclasses.replace(QUICK, model="gpt-4o")) as sim:
        settings = settings_of(sim)
        calibration = PromptCalibration()
        trimmer = PriorityTrimmer.from_settings(settings, calibration=calibration)
        agent = create_agent(
            build_chat_model(settings),
            tools=[lookup],
            response_format=Answer,
            middleware=[TrimmingMiddleware(trimmer)],
        )
        handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
        calls = Recorder()
        # The simulator answers filler text, not the JSON asked for: LangChain's parse fails
        # after the call ended.
        with pytest.raises(StructuredOutputValidationError):
            agent.invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [handler, calls]})
    assert calls.trims[-1].schema_count == 3  # lookup, recall and the schema
    assert calibration.observations == len(calls.trims) == 2


@pytest.mark.parametrize("ours_last", [False, True], ids=["ours first", "ours last"])
def test_a_request_grown_after_the_trim_is_said_once_with_the_fix(
    sim: RunningSimulator,
    tracer_provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
    ours_last: bool,
) -> None:
    settings = settings_of(sim)
    ours = TrimmingMiddleware(
        PriorityTrimmer.from_settings(settings, budget=BUDGET, calibration=PromptCalibration()),
        recall=False,
    )
    todo = TodoListMiddleware()  # adds its system prompt to each call it wraps
    agent = create_agent(
        build_chat_model(settings),
        tools=[lookup],
        middleware=[todo, ours] if ours_last else [ours, todo],
    )
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    calls = Recorder()
    messages: list[object] = []
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for turn in range(5):
            messages = [*messages, HumanMessage(f'Use lookup for "k{turn}". ' + "pad " * 60)]
            messages = agent.invoke({"messages": messages}, {"callbacks": [handler, calls]})[
                "messages"
            ]
    warned = [r.getMessage() for r in caplog.records if "listed after" in r.getMessage()]
    if ours_last:
        assert max(calls.server_tokens) <= BUDGET
        assert warned == []
    else:
        assert max(calls.server_tokens) > BUDGET  # what the warning is about
        assert len(warned) == 1  # once per handler, not once per call
        assert "list TrimmingMiddleware last" in warned[0]


async def test_nested_agents_streamed_and_batched_each_call_carries_its_own_trim(
    sim: RunningSimulator, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=600, calibration=PromptCalibration())
    child = create_agent(
        build_chat_model(settings, streaming=True),
        tools=[lookup],
        system_prompt="You are the researcher. " * 10,
        middleware=[TrimmingMiddleware(trimmer)],
        name="child",
    )

    @tool
    async def research(topic: str) -> str:
        """Researches a topic with the research assistant."""
        asked = f'Use lookup for "{topic}" please. ' + "pad " * 50
        out = await child.ainvoke({"messages": [HumanMessage(asked)]})
        return str(out["messages"][-1].text) + " detail" * 100

    parent = create_agent(
        build_chat_model(settings, streaming=True),
        tools=[research],
        system_prompt="You are the lead. " * 10,
        middleware=[TrimmingMiddleware(trimmer)],
        name="parent",
    )
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)

    async def streamed(thread: str) -> None:
        asked = {"messages": [HumanMessage(f'research "{thread}" please ' + "pad " * 40)]}
        config: Any = {"callbacks": [handler]}
        async for _ in parent.astream(asked, config, stream_mode="messages", subgraphs=True):
            pass

    await asyncio.gather(streamed("a"), streamed("b"))
    asks = [{"messages": [HumanMessage(f'research "{n}"')]} for n in "cde"]
    await parent.abatch(asks, {"callbacks": [handler]})

    chats = [s.attributes or {} for s in span_exporter.get_finished_spans() if s.name[:4] == "chat"]
    assert len(chats) == 20  # 5 runs of the parent: 2 calls of its own and 2 of the child's
    for attributes in chats:  # the simulator counts as the trimmer does
        assert attributes[semconv.TRIM_TOKENS_AFTER] == attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS]
    assert handler.open_runs == 0
