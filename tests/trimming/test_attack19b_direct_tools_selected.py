"""Attack on 6ac1333 (helper attack19b): ``TrimmingMiddleware`` tells a user's photo question
after a ``return_direct`` tool's result from an image a tool added by the request's tools.

An agent that sends each call only the tools its question needs (``LLMToolSelectorMiddleware``,
or a middleware of the app's own, listed before ``TrimmingMiddleware``) leaves the
``return_direct`` tool out of the request once the user moves on to another subject. The
conversation still holds that tool's result and the user's photo question after it; without the
tool in the request, the trim reads the photo question as an image the tool added, glued to the
finished lookup. Once the agent called the warranty tool for it, the next call drops the
question: the model gets the warranty tool's call and result without what was asked (the defect
test_asked_attack.py fixed, back through the tool selection), at budgets 400-540 here. With
every tool sent, the question is in every call of the turn.

Likely cause: ``TrimmingMiddleware._trim`` passes ``request.tools`` (the tools this call sends)
to the trim, and ``_trimmer._analysis_memo`` takes the ``return_direct`` tools from them; the
run ended by a tool of the agent's, sent on this call or not (the agent's tools, or the names
of every tool a conversation's results came from, would say it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from support.conversations import IMAGE, shelf_notes
from support.fakes import KeepsRequestBodies
from support.shop import PHOTO_ASK, check_warranty, lookup_order
from support.simulators import chat_openai_of

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware

COUNTER = TokenCounter.for_model("gpt-4o")


class NamedToolsOnly(AgentMiddleware[Any, Any, Any]):
    """Sends each call only the tools its latest user message names (as a tool selector does)."""

    def __init__(self, *, select: bool) -> None:
        super().__init__()
        self.select = select

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        asked = next(m for m in reversed(request.messages) if isinstance(m, HumanMessage))
        tools = [t for t in request.tools if isinstance(t, BaseTool) and t.name in asked.text]
        return handler(request.override(tools=tools) if self.select else request)


def second_turn(sim: RunningSimulator, *, select: bool, budget: int) -> list[dict[str, Any]]:
    """The request bodies of the photo question's turn."""
    bodies = KeepsRequestBodies()
    model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    agent = create_agent(
        model,
        tools=[lookup_order, check_warranty],
        middleware=[NamedToolsOnly(select=select), TrimmingMiddleware(trimmer, recall=False)],
    )
    first = [*shelf_notes(4), HumanMessage("Use lookup_order for order 1234.")]
    before: list[BaseMessage] = agent.invoke({"messages": first})["messages"]
    assert isinstance(before[-1], ToolMessage)  # the tool answered directly: the turn ended
    sent = len(bodies.sent)
    photo = HumanMessage([{"type": "text", "text": PHOTO_ASK}, IMAGE])
    agent.invoke({"messages": [*before, photo]})
    return bodies.sent[sent:]


@pytest.mark.parametrize("budget", [450, 540])
def test_with_every_tool_sent_the_photo_question_is_in_every_call(
    sim: RunningSimulator, budget: int
) -> None:
    bodies = second_turn(sim, select=False, budget=budget)
    assert len(bodies) == 2  # the call to check_warranty, then the answer
    assert [PHOTO_ASK in json.dumps(body) for body in bodies] == [True, True]


@pytest.mark.xfail(
    strict=True,
    reason="with the return_direct tool left out of the request by a tool selection, the "
    "photo question after its result is read as the tool's image and dropped",
)
@pytest.mark.parametrize("budget", [450, 540])
def test_attack19b_with_tools_selected_the_photo_question_is_in_every_call(
    sim: RunningSimulator, budget: int
) -> None:
    bodies = second_turn(sim, select=True, budget=budget)
    assert len(bodies) == 2
    assert [PHOTO_ASK in json.dumps(body) for body in bodies] == [True, True]
