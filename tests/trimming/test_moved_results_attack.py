"""Attacks on late tool results sent right after their call, from the user's side.

One trimmer is called on a conversation edited in place between calls, as an agent calls it;
every trim must trim as a fresh trimmer trims the same messages, send what an OpenAI endpoint
accepts (ChatOpenAI's wire form, the simulator over HTTP) and say what it left out in
``left_out_indices`` and ``cut_for_budget`` as its decisions do. Two defects were found, each
with a test that failed before its fix: the cache-first cut reused the positions it left out
after a tool result renamed in place moved to another round (no round's size changed), and a
second result of an answered call was sent right after the first (OpenAI: "Duplicate value for
'tool_call_id'").
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from support.fakes import Recorder
from support.simulators import settings_of
from trimming.test_unanswered_attack import COUNTER, call, checked_trim, raw, wire_problems

from agent_latency import build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import MARKER_TEXT, RecallingTrimmer, in_runs, left_out_runs
from agent_latency.trimming._trimmer import PriorityTrimmer


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.ERROR, logger="agent_latency"):
        yield


def model_of(sim: RunningSimulator) -> Any:
    return build_chat_model(settings_of(sim))


# --- the cut's remembered positions after a result renamed in place --------------------------


def two_late_results() -> list[BaseMessage]:
    """Calls a and b in two rounds, both results late (after the second round's call), of the
    same size; then twelve rounds of chat and a question on the bolts."""
    chat: list[BaseMessage] = [
        SystemMessage("You are the warehouse assistant."),
        HumanMessage("Where are the apples kept?"),
        AIMessage("", tool_calls=[call("a")]),
        HumanMessage("And the bolts?"),
        AIMessage("", tool_calls=[call("b")]),
        ToolMessage("apples in aisle one " + "row " * 30, tool_call_id="a"),
        ToolMessage("bolts in aisle two " + "row " * 30, tool_call_id="b"),
    ]
    for i in range(12):
        chat += [
            AIMessage(f"Noted {i}: " + "fine " * 20),
            HumanMessage(f"Next item {i} " + "thing " * 20),
        ]
    return [*chat, HumanMessage("Remind me about the bolts.")]


def test_results_swapped_in_place_are_cut_with_their_new_calls(sim: RunningSimulator) -> None:
    """The user fixes two results given the wrong ids (swapped in place): each moves to the
    other call's round, the rounds' sizes unchanged. The cut used to drop the positions it
    remembered from the previous call (the first round's old result, the second round's new
    one): a result sent without its call, a call without its result (the simulator: 400)."""
    chat = two_late_results()
    trimmer = PriorityTrimmer(700, token_counter=COUNTER)
    first = checked_trim(trimmer, chat, 700)
    assert first.cut_for_budget
    chat[5].tool_call_id, chat[6].tool_call_id = "b", "a"
    swapped = checked_trim(trimmer, chat, 700)
    assert swapped.cut_for_budget
    model_of(sim).invoke(swapped.messages)


# --- a second result of an answered call ------------------------------------------------------


@pytest.mark.parametrize("late", [True, False])
def test_a_second_result_of_an_answered_call_is_dropped(
    sim: RunningSimulator, late: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool result appended twice (a retried tool step): the second answers no pending call.
    Late, it used to be moved right after the first (OpenAI: 400 "Duplicate value for
    'tool_call_id'"); right after the first, it was sent as given."""
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a up"),
        AIMessage("", tool_calls=[call("a")]),
        ToolMessage("result a", tool_call_id="a"),
        *([HumanMessage("still there?")] if late else []),
        ToolMessage("result a, again", tool_call_id="a"),
        HumanMessage("so?"),
    ]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        trimmed = checked_trim(PriorityTrimmer(2000, token_counter=COUNTER), chat)
    second = 5 if late else 4
    assert f"or a call already answered, at message index(es) [{second}]" in caplog.text
    assert trimmed.decisions[second].rule == "orphan_tool_result"
    assert trimmed.messages == [m for i, m in enumerate(chat) if i != second]
    assert not trimmed.cut_for_budget and trimmed.left_out_indices == (second,)
    model_of(sim).invoke(trimmed.messages)


# --- what held: seeded growth with late results, renames and inserts --------------------------

WORDS = [
    "apple",
    "bolt",
    "cherry",
    "delta",
    "echo",
    "fox",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def grow(rng: random.Random, chat: list[BaseMessage], pending: list[str], issued: int) -> int:
    """One step of a user's conversation: a turn, calls answered now or later (late), an
    answer, or an edit in place (a removal, an insert, a result renamed, calls changed)."""
    draw = rng.random()
    if draw < 0.2:
        chat.append(HumanMessage(words(rng, rng.randint(2, 40))))
    elif draw < 0.4:
        ids = [f"c{issued + i}" for i in range(rng.randint(1, 3))]
        issued += len(ids)
        extra = {"tool_calls": [raw(i) for i in ids]} if rng.random() < 0.4 else {}
        chat.append(
            AIMessage(words(rng, 2), tool_calls=[call(i) for i in ids], additional_kwargs=extra)
        )
        for id_ in ids:
            if rng.random() < 0.5:
                chat.append(ToolMessage(words(rng, rng.randint(1, 80)), tool_call_id=id_))
            else:
                pending.append(id_)
    elif draw < 0.55 and pending:
        id_ = pending.pop(rng.randrange(len(pending)))
        chat.append(ToolMessage(words(rng, rng.randint(1, 80)), tool_call_id=id_))
    elif draw < 0.65:
        chat.append(AIMessage(words(rng, rng.randint(1, 30))))
    elif draw < 0.7 and len(chat) > 3:
        del chat[rng.randrange(1, len(chat))]
    elif draw < 0.8:
        chat.insert(rng.randrange(1, len(chat) + 1), HumanMessage(words(rng, rng.randint(2, 10))))
    elif draw < 0.9:
        results = [m for m in chat if isinstance(m, ToolMessage)]
        calls = [c["id"] for m in chat if isinstance(m, AIMessage) for c in m.tool_calls]
        if results:
            rng.choice(results).tool_call_id = rng.choice([*calls, "zz"])
    else:
        callers = [m for m in chat if isinstance(m, AIMessage) and m.tool_calls]
        if callers:
            edited = rng.choice(callers)
            edited.tool_calls = edited.tool_calls[1:]
    for message in chat:
        if message.id is None:
            message.id = f"m{issued}-{rng.random()}"
    return issued


def test_seeded_growth_with_late_results_trims_like_fresh_and_recalls_what_was_left_out() -> None:
    """Every trim equals a fresh trimmer's and is valid on the wire; with the recall marker,
    the marker comes only with a cut for the budget, and the left-out runs an agent keeps read
    back exactly the messages the decisions leave out, late results moved or not."""
    seen: set[str] = set()
    for seed in range(40):
        rng = random.Random(seed)
        budget = rng.choice([150, 300, 500, 900, 3000])
        trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
        recalling = RecallingTrimmer(PriorityTrimmer(budget, token_counter=COUNTER))
        chat: list[BaseMessage] = [SystemMessage("sys " + words(rng, 5))]
        pending: list[str] = []
        issued = 0
        for _ in range(25):
            issued = grow(rng, chat, pending, issued)
            result = checked_trim(trimmer, chat, budget)
            seen |= {d.rule for d in result.decisions}
            before = copy.deepcopy(chat)
            marked = recalling.trim(chat)
            assert chat == before
            assert wire_problems(marked.messages) == []
            decided = tuple(d.index for d in marked.decisions if d.action != "kept")
            assert marked.left_out_indices == decided
            if any(m is recalling.marker for m in marked.messages):
                assert marked.cut_for_budget
            runs = left_out_runs(chat, marked) if marked.changed else []
            assert in_runs(chat, runs) == [chat[i] for i in decided if marked.changed]
    assert {"late_tool_result", "recalled", "dropped_at_cut", "orphan_tool_result"} <= seen


def late_chats(seed: int) -> list[list[BaseMessage]]:
    """The prefixes of a seeded conversation with late results (no edits in place)."""
    rng = random.Random(seed)
    chat: list[BaseMessage] = [SystemMessage("sys")]
    pending: list[str] = []
    issued = 0
    prefixes = []
    while len(prefixes) < 20:
        size = len(chat)
        issued = grow(rng, chat, pending, issued) if rng.random() < 0.65 else issued
        if len(chat) > size:
            prefixes.append(list(chat))
    return prefixes


@pytest.mark.parametrize("seed", range(4))
def test_batch_and_abatch_over_chats_with_late_results_trim_like_fresh_trimmers(
    seed: int,
) -> None:
    prefixes = late_chats(seed)
    fresh = [PriorityTrimmer(300, token_counter=COUNTER).trim(p) for p in prefixes]
    trimmer = PriorityTrimmer(300, token_counter=COUNTER)
    assert trimmer.batch(prefixes) == [r.messages for r in fresh]
    assert asyncio.run(trimmer.abatch(prefixes)) == [r.messages for r in fresh]
    assert all(wire_problems(r.messages) == [] for r in fresh)


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 60


def test_agent_with_user_messages_while_its_tools_run_sends_valid_marked_prompts(
    sim: RunningSimulator,
) -> None:
    """``create_agent`` with the middleware (recall on) over the simulator, a user message put
    in its state before every other tool step (a late result each time), under a budget that
    cuts: every prompt is valid, the marker comes only with a cut for the budget and the
    left-out indices are the decisions'."""
    settings = settings_of(sim)
    graph = create_agent(
        build_chat_model(settings),
        tools=[lookup],
        system_prompt="You are the inventory assistant.",
        middleware=[TrimmingMiddleware(PriorityTrimmer.from_settings(settings, budget=700))],
        checkpointer=InMemorySaver(),
        interrupt_before=["tools"],
    )
    recorder = Recorder()
    config: Any = {"configurable": {"thread_id": "t"}, "callbacks": [recorder]}
    for i in range(5):
        graph.invoke({"messages": [HumanMessage(f'Use lookup for "k{i}". ' + "why " * 20)]}, config)
        if i % 2 == 0:
            graph.update_state(config, {"messages": [HumanMessage(f"Still there {i}?")]})
        while graph.get_state(config).next:
            graph.invoke(None, config)
    assert len(recorder.prompts) == len(recorder.trims) > 5
    assert sum(t.moved_messages for t in recorder.trims) > 0
    assert any(t.cut_for_budget for t in recorder.trims)
    for prompt, trim in zip(recorder.prompts, recorder.trims, strict=True):
        assert wire_problems(prompt) == []
        marked = any(m.content == MARKER_TEXT for m in prompt)
        assert not marked or trim.cut_for_budget
        assert trim.left_out_indices == tuple(d.index for d in trim.decisions if d.action != "kept")
