"""Attacks on ``tool_budget`` where the trimmer cannot choose the tools sent (helper attack19).

docs/trimming.md: "A chain or a LangGraph agent binds its tools to the model itself, so there
`tool_budget` is not used." It was used for the count (each test here failed before the fix):
``trimmer.for_model(bound)`` and ``as_pre_model_hook(tools=...)`` counted only the tools the
tool budget would keep, while the model sends every tool bound to it, so the request sent was
over the budget and the trim said it was not (a settings file's tool budget reaches a chain's
``from_settings`` trimmer this way). Now only a trim given the request's tools (``trim(tools=...)``,
as ``TrimmingMiddleware`` does) chooses them; the others count them all and warn once.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

BUDGET = 1500
COUNTER = TokenCounter()  # the trimmer's default counter
PROMPT = SystemMessage("You run the warehouse.")


def shelf_tool(n: int) -> BaseTool:
    @tool(
        f"lookup_shelf_{n}",
        description=f"Looks up shelf {n}. "
        + "It reports inventory levels, stock counts and reorder thresholds. " * 5,
    )
    def lookup(shelf: str, detail: bool = False) -> str:
        return "ok"

    return lookup


TOOLS = [shelf_tool(n) for n in range(12)]
DEFINITIONS: list[dict[str, Any]] = [convert_to_openai_tool(t) for t in TOOLS]


def conversation() -> list[BaseMessage]:
    """Ten rounds: the trim without a tool budget sends 1,483 tokens, with one 1,783."""
    messages: list[BaseMessage] = []
    for r in range(10):
        messages += [HumanMessage(f"Note {r}: restocked " + "ok " * 30), AIMessage(f"Noted {r}.")]
    return [*messages, HumanMessage("What is on shelf 3?")]


def test_the_tools_alone_fit_the_budget() -> None:
    # So a trim that counts them all fits the request: the defects below are the tool budget's.
    assert COUNTER.count_tools(DEFINITIONS) < BUDGET - 100
    bound = ChatOpenAI(model="gpt-4o-mini", api_key=SecretStr("unused")).bind_tools(TOOLS)
    result = PriorityTrimmer(BUDGET).for_model(bound).trim([PROMPT, *conversation()])
    assert COUNTER.count_request(result.messages, DEFINITIONS) <= BUDGET


def test_in_a_chain_a_tool_budget_never_puts_the_request_sent_over_the_budget() -> None:
    bound = ChatOpenAI(model="gpt-4o-mini", api_key=SecretStr("unused")).bind_tools(TOOLS)
    trimmer = PriorityTrimmer(BUDGET, tool_budget=200).for_model(bound)
    result = trimmer.trim([PROMPT, *conversation()])
    sent = COUNTER.count_request(result.messages, DEFINITIONS)  # the bound model sends all 12
    assert sent <= BUDGET or result.over_budget, (sent, result.tokens_after)


def test_with_a_pre_model_hook_a_tool_budget_never_puts_the_request_sent_over_the_budget() -> None:
    hook = PriorityTrimmer(BUDGET, tool_budget=200).as_pre_model_hook(
        prompt=PROMPT, tools=TOOLS, recall=False
    )
    out = hook({"messages": conversation()})["llm_input_messages"]
    # LangGraph sends its prompt, the hook's messages and every tool of the agent.
    assert COUNTER.count_request([PROMPT, *out], DEFINITIONS) <= BUDGET


def test_a_tool_budget_the_trim_cannot_use_is_warned_of_once_per_trimmer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bound = ChatOpenAI(model="gpt-4o-mini", api_key=SecretStr("unused")).bind_tools(TOOLS)
    trimmer = PriorityTrimmer(BUDGET, tool_budget=200)
    chained = trimmer.for_model(bound)
    with caplog.at_level("WARNING", logger="agent_latency.trimming"):
        for _ in range(3):
            chained.trim([PROMPT, *conversation()])
        chosen = trimmer.trim([PROMPT, *conversation()], tools=TOOLS)  # the middleware's way
    warned = [r.getMessage() for r in caplog.records if "tool_budget is not used" in r.getMessage()]
    assert len(warned) == 1
    assert "TrimmingMiddleware" in warned[0]
    assert chosen.dropped_tools  # given the request's tools, the trim chooses them
