"""Attack on fdef395 (helper attack19b): a trimmer from ``for_model`` counts every tool and does
not use its ``tool_budget`` (its tools are bound to the model), and that mark goes with every
trimmer derived from it (``_with``).

A user who builds one trimmer for a model (``PriorityTrimmer(..., tool_budget=200)
.for_model(model)``, the documented way to trim before it in a chain) and gives it to
``TrimmingMiddleware`` loses the tool budget in the agent: the middleware's trims are given the
request's tools, which docs/trimming.md says are chosen there ("``TrimmingMiddleware`` sends
only the tools kept"), yet every tool is sent, and the warning logged says "To send fewer, use
TrimmingMiddleware", which the user does. A trimmer's mark of a bound model belongs to the
trims it makes for that model, not to the middleware's (which chooses the tools it sends).

Fixed: a trim given the request's tools (``trim(tools=...)``, as the middleware does) chooses
from them whatever trimmer makes it; only a trim of the trimmer's own bound tools counts them
all.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from support.wire import recording_chat_openai

from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware


def shelf_tool(n: int) -> BaseTool:
    @tool(
        f"lookup_shelf_{n}",
        description=f"Looks up shelf {n}. "
        + "It reports inventory levels, stock counts and reorder thresholds. " * 5,
    )
    def lookup(shelf: str) -> str:
        return "ok"

    return lookup


TOOLS = [shelf_tool(n) for n in range(12)]


def tools_sent(trimmer: PriorityTrimmer) -> list[str]:
    """The names of the tools an agent with ``trimmer``'s middleware sends to OpenAI's API."""
    bodies: list[dict[str, Any]] = []
    agent = create_agent(
        model(bodies), TOOLS, middleware=[TrimmingMiddleware(trimmer, recall=False)]
    )
    agent.invoke({"messages": [HumanMessage("What is on shelf 3?")]})
    (body,) = bodies
    return [t["function"]["name"] for t in body.get("tools", [])]


def model(bodies: list[dict[str, Any]]) -> ChatOpenAI:
    return recording_chat_openai(bodies, model="gpt-4o-mini", base_url="https://api.openai.com/v1")


def test_the_middleware_uses_a_tool_budget() -> None:
    sent = tools_sent(PriorityTrimmer(1_500, tool_budget=200))
    assert "lookup_shelf_3" in sent
    assert len(sent) < len(TOOLS)


# Failed before a request's own tools were always chosen from (the bound mark skipped them).
def test_attack19b_a_for_model_trimmer_in_the_middleware_uses_its_tool_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trimmer = PriorityTrimmer(1_500, tool_budget=200).for_model(model([]))
    with caplog.at_level("WARNING", logger="agent_latency.trimming"):
        sent = tools_sent(trimmer)
    assert "lookup_shelf_3" in sent
    assert len(sent) < len(TOOLS)
    assert "use TrimmingMiddleware" not in caplog.text
