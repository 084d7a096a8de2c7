"""Attacks on ``TrimmingMiddleware`` with LangChain v1 agent features users combine with it: real
``create_agent`` agents with the real ``ChatOpenAI``, over HTTP to the simulator.

Defects found (all three fixed in ``_middleware.py``):

* An agent whose own tools include one named ``recall``: ``create_agent`` keeps one tool per
  name, the user's, and drops the middleware's without a word; the elision marker still tells
  the model to call ``recall`` to read back what was cut, so the model calls the user's tool
  with words of the history. Now: the marker invites no call and a warning names the clash.
* Structured output (``response_format=ToolStrategy(...)``, or a bare schema counted as one):
  the middleware makes the output tools anew on every model call, so the trimmer's count of the
  request's tools, remembered by the objects' identity, is missed on every call and all the
  tools are converted and counted again (40 tools: 0.05 -> 1.0 ms a trim), each call's entry
  pushing another request's out of the 32 remembered. A ``ProviderStrategy``'s
  ``response_format`` dict is made anew on every call too (``to_model_kwargs()``): the same
  miss (seen by hand: 2 conversions for 2 calls; the simulator answers no JSON, so the run
  ends in LangChain's parse error and is not a test here). Now: made once per strategy.
* ``middleware=[TrimmingMiddleware(...), ModelFallbackMiddleware(other)]`` with a primary on
  OpenAI's API: the middleware puts ``prompt_cache_key`` in the request's model settings for
  the primary, and the fallback, called inner with the same settings, sends it to its own
  server, one that is not OpenAI's (a provider client that does not know the keyword, such as
  Anthropic's, fails the fallback call: when the primary is down, the agent fails). Listed the
  other way round the key is decided for the fallback and left out. Now: the key goes on a
  shallow copy of the request's model (in its ``model_kwargs``), which the fallback replaces.

What held is pinned below: LangChain's own middleware before and after ours (summarization,
context editing, call limits, tool retries, human in the loop resumed by a restarted process)
never made a prompt the endpoint refuses nor one over the budget.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    SummarizationMiddleware,
    ToolRetryMiddleware,
)
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel
from support.fakes import KeepsRequestBodies, Recorder
from support.simulators import chat_openai_of, settings_of
from support.wire import chat_completion

from agent_latency import PriorityTrimmer, build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.trimming import TrimmingMiddleware, _request
from agent_latency.trimming._recall import MARKER_TEXT, PLAIN_MARKER_TEXT


def chat(rounds: int) -> list[BaseMessage]:
    """A long chat to cut: each round a question and an answer of ~100 tokens each."""
    messages: list[BaseMessage] = []
    for r in range(rounds):
        messages += [HumanMessage(f"Question {r}: " + "tell me " * 50), AIMessage("ok " * 100)]
    return messages


@tool("recall")
def recall_orders(customer: str) -> str:
    """Recalls a customer's past orders from the shop's database."""
    return f"orders of {customer}: none"


def test_a_users_own_recall_tool_is_not_what_the_marker_sends_the_model_to(
    sim: RunningSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=800)
    agent = create_agent(
        build_chat_model(settings), tools=[recall_orders], middleware=[TrimmingMiddleware(trimmer)]
    )
    calls = Recorder()
    agent.invoke({"messages": [*chat(12), HumanMessage("and now?")]}, {"callbacks": [calls]})

    (trim, *_) = calls.trims
    assert trim.dropped_messages > 0  # the history was cut: a marker was sent
    invited = [m for m in calls.prompts[0] if m.text == MARKER_TEXT]
    assert invited == []  # the only `recall` the model has is the shop's
    assert [m for m in calls.prompts[0] if m.text == PLAIN_MARKER_TEXT]  # told of the cut
    clashes = [r for r in caplog.records if "took its place" in r.getMessage()]
    assert len(clashes) == 1 and clashes[0].levelname == "WARNING"


class Answer(BaseModel):
    """The answer to the user's question."""

    text: str


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}"


def test_an_agents_structured_output_tools_are_counted_once_not_on_every_call(
    sim: RunningSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[int] = []
    wire_tools = _request.wire_tools

    def counting(tools: Any, **options: Any) -> Any:
        converted.append(len(tools))
        return wire_tools(tools, **options)

    monkeypatch.setattr(_request, "wire_tools", counting)
    settings = settings_of(sim)
    for response_format in (None, ToolStrategy(Answer)):
        converted.clear()
        trimmer = PriorityTrimmer.from_settings(settings, budget=2_000)
        agent = create_agent(
            build_chat_model(settings),
            tools=[lookup],
            response_format=response_format,
            middleware=[TrimmingMiddleware(trimmer)],
        )
        calls = Recorder()
        messages: list[BaseMessage] = []
        for turn in range(3):
            messages = [*messages, HumanMessage(f"Tell me about k{turn}.")]
            messages = agent.invoke({"messages": messages}, {"callbacks": [calls]})["messages"]
        assert len(calls.trims) >= 3
        assert len(converted) == 1, response_format  # the same tools, converted once


def openai_down(sent: list[dict[str, Any]]) -> ChatOpenAI:
    """A ``ChatOpenAI`` on OpenAI's API, which is down: keeps each request body, answers 503."""

    def refuse(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.read()))
        return httpx.Response(503, json={"error": {"message": "down"}})

    transport = httpx.MockTransport(refuse)
    client = httpx.Client(transport=transport)
    return ChatOpenAI(model="gpt-4o", api_key="sk-test", max_retries=0, http_client=client)


def test_a_fallback_model_gets_no_cache_key_decided_for_openais_api(
    sim: RunningSimulator,
) -> None:
    primary_sent: list[dict[str, Any]] = []
    primary = openai_down(primary_sent)
    fallback_server = KeepsRequestBodies()
    fallback = chat_openai_of(sim, http_client=httpx.Client(transport=fallback_server))
    trimmer = PriorityTrimmer.from_settings(settings_of(sim), budget=2_000)
    agent = create_agent(
        primary,
        tools=[lookup],
        middleware=[TrimmingMiddleware(trimmer), ModelFallbackMiddleware(fallback)],
    )
    agent.invoke({"messages": [HumanMessage("hello")]})

    assert len(fallback_server.sent) == 2  # the primary is down: every call fell back
    assert [body.get("prompt_cache_key") for body in fallback_server.sent] == [None, None]
    # The primary still got the conversation's key on each call, from a copy of the model.
    (key, again) = [body.get("prompt_cache_key") for body in primary_sent]
    assert key == again and key.startswith("agent-latency-")
    assert primary.model_kwargs == {}


@pytest.mark.parametrize("ours_last", [False, True], ids=["ours first", "ours last"])
def test_a_fallback_on_openais_api_gets_the_key_only_when_ours_is_listed_after_it(
    ours_last: bool,
) -> None:
    """The key is decided for the model the request names when our middleware sees it: listed
    first, the fallback a later middleware swaps in is not that model and gets none, even on
    OpenAI's API; listed last (after ``ModelFallbackMiddleware``) each model gets its own
    decision."""
    fallback_sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        fallback_sent.append(json.loads(request.read()))
        return chat_completion("ok")

    fallback = ChatOpenAI(
        model="gpt-4o-mini",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
    )
    primary_sent: list[dict[str, Any]] = []
    ours = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)
    theirs = ModelFallbackMiddleware(fallback)
    agent = create_agent(
        openai_down(primary_sent), middleware=[theirs, ours] if ours_last else [ours, theirs]
    )
    agent.invoke({"messages": [HumanMessage("hello")]})

    (primary_body,) = primary_sent
    (fallback_body,) = fallback_sent
    key = primary_body["prompt_cache_key"]
    assert fallback_body.get("prompt_cache_key") == (key if ours_last else None)


# --- what held: LangChain's own middleware beside ours, in both orders ------------------------


@tool
def delete_file(path: str) -> str:
    """Deletes a file at a path."""
    return f"deleted {path}: " + "ok " * 50


THEIRS: dict[str, Any] = {
    "summarization": lambda settings: SummarizationMiddleware(
        model=build_chat_model(settings), trigger=("messages", 12), keep=("messages", 5)
    ),
    "context editing": lambda _: ContextEditingMiddleware(
        edits=[ClearToolUsesEdit(trigger=300, keep=1)]
    ),
    "call limit": lambda _: ModelCallLimitMiddleware(thread_limit=50, run_limit=5),
    "tool retry": lambda _: ToolRetryMiddleware(max_retries=1),
    "human in the loop": lambda _: HumanInTheLoopMiddleware(interrupt_on={"delete_file": True}),
}


def sendable(prompt: list[BaseMessage]) -> bool:
    """Every tool result follows its call and every call has its result (else OpenAI: 400)."""
    called: set[str | None] = set()
    for message in prompt:
        if isinstance(message, AIMessage):
            called |= {call["id"] for call in message.tool_calls}
        if isinstance(message, ToolMessage) and message.tool_call_id not in called:
            return False
    answered = {m.tool_call_id for m in prompt if isinstance(m, ToolMessage)}
    return called <= answered


@pytest.mark.parametrize("ours_first", [True, False], ids=["ours first", "theirs first"])
@pytest.mark.parametrize("theirs", list(THEIRS))
def test_langchains_middleware_beside_ours_sends_valid_prompts_within_the_budget(
    sim: RunningSimulator, theirs: str, ours_first: bool
) -> None:
    settings = settings_of(sim)
    saver = InMemorySaver()

    def agent() -> Any:  # made anew for each turn: a process that restarted, same checkpointer
        ours = TrimmingMiddleware(PriorityTrimmer.from_settings(settings, budget=700))
        other: AgentMiddleware[Any, Any] = THEIRS[theirs](settings)
        return create_agent(
            build_chat_model(settings),
            tools=[lookup, delete_file],
            system_prompt="Be brief. " * 20,
            middleware=[ours, other] if ours_first else [other, ours],
            checkpointer=saver,
        )

    calls = Recorder()
    config: Any = {"configurable": {"thread_id": "t"}, "callbacks": [calls]}
    decisions = iter(["approve", "reject", "edit", "approve"])
    for turn in range(4):
        asked = f'Use lookup and delete_file for "f{turn}" please. ' + "pad " * 40
        out = agent().invoke({"messages": [HumanMessage(asked)]}, config)
        if "__interrupt__" in out:
            decision: dict[str, Any] = {"type": next(decisions)}
            if decision["type"] == "edit":
                decision["edited_action"] = {"name": "delete_file", "args": {"path": "/tmp/x"}}
            out = agent().invoke(Command(resume={"decisions": [decision]}), config)
        assert "__interrupt__" not in out

    trims = iter(calls.trims)
    for prompt, server in zip(calls.prompts, calls.server_tokens, strict=True):
        assert sendable(prompt)
        if prompt[0].text.startswith("Be brief."):  # not the summarizer's own call
            assert server <= next(trims).tokens_after <= 700
    assert next(trims, None) is None
    assert any(trim.dropped_messages for trim in calls.trims)  # the history was cut
    if theirs == "human in the loop":
        assert next(decisions, None) is None  # each turn was paused and resumed
