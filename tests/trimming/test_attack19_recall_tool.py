"""Attacks on the recall tool from the user's side (helper attack19).

Fixed: with a ``tool_budget``, ``TrimmingMiddleware`` could leave its own ``recall`` tool out
of the request while the elision marker told the model to call it (an ``xfail`` here until
fdef395: the tool is pinned). The tool read ids back only when the query wrote them bare or
as ``[id ...]``: the ids the tool lists, asked for as a JSON list, quoted, or at the end of a
sentence, matched nothing (an ``xfail`` here until 746b82b). Now the left-out ids are looked up
in the query wherever they stand on their own (``_recall._named_ids``), and none inside a
longer word or number.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from support.fakes import ToolCallingFake

from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware
from agent_latency.trimming._recall import MARKER_TEXT, TOOL_NAME, RecallingTrimmer


def shelf_tool(n: int) -> BaseTool:
    @tool(
        f"lookup_shelf_{n}",
        description=f"Looks up shelf {n}: its inventory levels, stock counts and reorder "
        "thresholds for the products on it.",
    )
    def lookup(shelf: str, detail: bool = False) -> str:
        return "ok"

    return lookup


def history(rounds: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(rounds):
        said = f"Note {r}: the shelves were restocked " + "ok " * 30
        messages += [HumanMessage(said, id=f"h{r}"), AIMessage(f"Noted {r}.", id=f"a{r}")]
    return messages


def sent_by(middleware: TrimmingMiddleware, request: ModelRequest[Any]) -> ModelRequest[Any]:
    received: list[ModelRequest[Any]] = []

    def handler(sent: ModelRequest[Any]) -> ModelResponse[Any]:
        received.append(sent)
        return ModelResponse(result=[AIMessage("ok")])

    middleware.wrap_model_call(request, handler)
    return received[0]


# Failed before the recall tool was pinned (the request held only lookup_shelf_*).
def test_a_tool_budget_never_leaves_out_the_recall_tool_the_marker_invites() -> None:
    # An agent with a dozen tools and a tool budget (docs: "Tool definitions as a trimmable
    # class"), on a long conversation: the history is cut and the marker is sent.
    middleware = TrimmingMiddleware(PriorityTrimmer(1500, tool_budget=200))
    tools = [shelf_tool(n) for n in range(12)]
    request = ModelRequest(
        model=ToolCallingFake(messages=iter([])),
        messages=[*history(30), HumanMessage("What is on shelf 3?", id="q")],  # type: ignore[list-item]
        system_message=SystemMessage("You run the warehouse."),
        tools=[*tools, *middleware.tools],
    )
    sent = sent_by(middleware, request)
    invites = any(m.content == MARKER_TEXT for m in sent.messages)
    offered = [t.name for t in sent.tools if isinstance(t, BaseTool)]
    assert invites  # the history was cut and the model is told to call `recall`...
    assert TOOL_NAME in offered  # ...so the request must offer it (it held only lookup_shelf_*)


IDS = [str(uuid.UUID(int=n + 1)) for n in range(40)]


def uuid_conversation() -> list[BaseMessage]:
    """An agent's state: UUID ids, one note per round, the question last."""
    messages: list[BaseMessage] = [SystemMessage("You run the warehouse.")]
    for r in range(20):
        said = f"Note {r}: bay {r} holds {100 + r} crates " + "restocked and dusted " * 8
        messages += [HumanMessage(said, id=IDS[2 * r]), AIMessage(f"Noted {r}.", id=IDS[2 * r + 1])]
    messages.append(HumanMessage("Which bay holds 103 crates?", id="question"))
    return messages


@pytest.mark.parametrize(
    "query",
    [
        f'["{IDS[2]}", "{IDS[4]}"]',  # a JSON list of the ids the tool listed
        f"'{IDS[2]}'",  # quoted
        f'"{IDS[2]}"',
        f"Read back {IDS[2]}.",  # the end of a sentence
    ],
)
def test_the_recall_tool_finds_ids_written_as_models_write_them(query: str) -> None:
    recalling = RecallingTrimmer(PriorityTrimmer(400))
    messages = uuid_conversation()
    left_out = recalling.left_out(messages)
    assert any(m.id == IDS[2] for m in left_out)  # note 1 was left out
    answer = recalling.read(left_out, query, conversation=messages)
    # The tool answers what it was asked for by id, as it does for the bare id.
    assert recalling.read(left_out, IDS[2], conversation=messages).startswith(f"[id {IDS[2]}]")
    assert answer.startswith(f"[id {IDS[2]}]"), answer


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("Read back (h1), please.", "h1"),
        ('{"ids": ["h1"]}', "h1"),  # as JSON
        ("Read back `h1`; nothing else.", "h1"),
        ("Read back h1.5, h12b, xh12 and h1-2.", None),  # in longer words and numbers
    ],
)
def test_the_recall_tool_reads_back_only_the_ids_named(query: str, named: str | None) -> None:
    recalling = RecallingTrimmer(PriorityTrimmer(400))
    messages = [*history(30), HumanMessage("What is on shelf 3?", id="q")]
    left_out = recalling.left_out(messages)
    assert {"h1", "h12"} <= {m.id for m in left_out}
    answer = recalling.read(left_out, query, conversation=messages)
    if named is not None:
        assert answer.startswith(f"[id {named}] human: Note 1: "), answer
    else:
        assert "[id h1]" not in answer, answer
    assert "[id h12]" not in answer, answer
