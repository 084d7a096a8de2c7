"""Attacks on tool calls no result answers, and on the analysis memo, from the user's side.

One trimmer is called on a growing conversation (the same message objects and new ones), as an
agent calls it, with edits in place between calls; every trim's wire form (as ChatOpenAI sends
it) must pair each assistant tool call with a following tool message, send no tool message
without its call, count what it sends, leave the input unchanged and trim as a fresh trimmer
trims the same messages. Every defect found has a test that failed before its fix: a
``ChatMessage`` result renamed in place, an ``AIMessageChunk``'s copy, raw calls left in
``additional_kwargs``, a ``ChatMessage`` result without its call, a late result sent apart from
its call, the same warning on every call, and the elision marker sent for no cut.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.tools import tool
from langchain_openai.chat_models.base import _convert_message_to_dict
from langgraph.checkpoint.memory import InMemorySaver
from support.fakes import Recorder
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import MARKER_TEXT
from agent_latency.trimming._result import TrimResult
from agent_latency.trimming._trimmer import PriorityTrimmer

COUNTER = TokenCounter()


def call(id_: str) -> dict[str, Any]:
    return {"name": "lookup", "args": {"key": id_}, "id": id_, "type": "tool_call"}


def raw(id_: str) -> dict[str, Any]:
    """A call as ChatOpenAI keeps it in ``additional_kwargs``."""
    return {"id": id_, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def wire_problems(messages: list[BaseMessage]) -> list[str]:
    """What an OpenAI endpoint would refuse (HTTP 400) in ``messages`` as ChatOpenAI sends them:
    a call not answered by the tool messages right after it, a tool message answering none."""
    problems: list[str] = []
    pending: set[Any] = set()
    answered: set[Any] = set()  # by the tool messages since the calls
    for index, sent in enumerate(map(_convert_message_to_dict, messages)):
        if sent["role"] == "tool":
            if sent.get("tool_call_id") in answered:
                problems.append(f"{index}: a second result of its call")
            elif sent.get("tool_call_id") not in pending:
                problems.append(f"{index}: tool message without its call")
            pending.discard(sent.get("tool_call_id"))
            answered.add(sent.get("tool_call_id"))
            continue
        if pending:
            problems.append(f"{index}: calls {sorted(pending)} unanswered before it")
        pending, answered = {c["id"] for c in sent.get("tool_calls", ())}, set()
    if pending:
        problems.append(f"end: calls {sorted(pending)} unanswered")
    return problems


def asked_and_answered(asked: AIMessage, answer: AIMessage | None = None) -> list[BaseMessage]:
    """A chat where ``asked`` calls "a", its result follows, then ``answer`` and a new turn."""
    return [
        SystemMessage("s"),
        HumanMessage("look a up"),
        asked,
        ToolMessage("result a", tool_call_id="a"),
        answer or AIMessage("Found it."),
        HumanMessage("next"),
    ]


def checked_trim(
    trimmer: PriorityTrimmer, messages: list[BaseMessage], budget: int = 2000
) -> TrimResult:
    """Trims ``messages`` with ``trimmer`` (of ``budget``) and checks what every trim must
    hold."""
    before = copy.deepcopy(messages)
    result = trimmer.trim(messages)
    assert wire_problems(result.messages) == []
    assert result.tokens_after == COUNTER.count_messages(result.messages)
    assert messages == before  # the input is not changed
    fresh = PriorityTrimmer(budget, token_counter=COUNTER).trim(messages)
    assert result.messages == fresh.messages
    assert [d.rule for d in result.decisions] == [d.rule for d in fresh.decisions]
    # What the recall marker and an agent's left-out runs read, found without the decisions.
    assert result.left_out_indices == tuple(d.index for d in result.decisions if d.action != "kept")
    assert result.cut_for_budget == any(
        d.action == "dropped" and d.rule not in {"orphan_tool_result", "unanswered_tool_call"}
        for d in result.decisions
    )
    return result


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.ERROR, logger="agent_latency"):
        yield


# --- a growing conversation ---------------------------------------------------------------------


def test_parallel_calls_pending_then_answered_then_one_result_removed() -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    parallel = AIMessage("Looking both up.", tool_calls=[call("a"), call("b")])
    chat: list[BaseMessage] = [SystemMessage("s"), HumanMessage("look a and b up"), parallel]
    pending = checked_trim(trimmer, chat)  # the calls as the last message: none answered yet
    assert pending.messages[2] is not parallel and pending.messages[2].tool_calls == []
    chat.append(ToolMessage("result a", tool_call_id="a"))
    half = checked_trim(trimmer, chat)
    assert [c["id"] for c in half.messages[2].tool_calls] == ["a"]
    chat.append(ToolMessage("result b", tool_call_id="b"))
    answered = checked_trim(trimmer, chat)
    assert answered.messages == chat and answered.messages[2] is parallel  # the copy is gone
    assert answered.decisions[2].rule != "unanswered_tool_call"
    chat += [AIMessage("Both found."), HumanMessage("thanks")]
    checked_trim(trimmer, chat)
    del chat[3]  # result a removed later (a user's cleanup)
    removed = checked_trim(trimmer, chat)
    assert [c["id"] for c in removed.messages[2].tool_calls] == ["b"]
    chat.insert(3, ToolMessage("result a again", tool_call_id="a"))  # and brought back
    assert checked_trim(trimmer, chat).messages[2] is parallel
    assert [c["id"] for c in parallel.tool_calls] == ["a", "b"]


EDITS: dict[str, Callable[[AIMessage], None]] = {
    "append": lambda m: m.tool_calls.append(call("z")),
    "reassign": lambda m: setattr(m, "tool_calls", [call("a"), call("y")]),
    "reassign_empty": lambda m: setattr(m, "tool_calls", []),
    "id_in_place": lambda m: m.tool_calls[0].update(id="renamed"),
    "invalid_append": lambda m: m.invalid_tool_calls.append(
        {
            "name": "lookup",
            "args": "{oops",
            "id": "bad",
            "error": "JSON",
            "type": "invalid_tool_call",
        }
    ),
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_a_tool_call_edited_in_place_between_calls_is_seen(
    edit: Callable[[AIMessage], None],
) -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    asked = AIMessage("Checking.", tool_calls=[call("a")])
    chat = asked_and_answered(asked)
    checked_trim(trimmer, chat)
    edit(asked)
    checked_trim(trimmer, chat)
    chat.append(AIMessage("More."))
    checked_trim(trimmer, chat)


def test_a_call_appended_in_place_to_a_message_without_calls_is_left_out() -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    plain = AIMessage("Plain answer.")
    chat: list[BaseMessage] = [SystemMessage("s"), HumanMessage("q"), plain, HumanMessage("n")]
    assert checked_trim(trimmer, chat).messages[2] is plain
    plain.tool_calls.append(call("p"))  # the empty list the memo holds, filled
    assert checked_trim(trimmer, chat).decisions[2].rule == "unanswered_tool_call"


@pytest.mark.parametrize(
    "chat",
    [
        pytest.param(
            [
                AIMessage("", tool_calls=[call("x")]),
                AIMessage("Again.", tool_calls=[call("x")]),
                ToolMessage("result x", tool_call_id="x"),
            ],
            id="same_id_twice_answered_once",
        ),
        pytest.param(
            [
                AIMessage("", tool_calls=[call("x")]),
                ToolMessage("result x", tool_call_id="x"),
                AIMessage("", tool_calls=[call("x")]),
            ],
            id="same_id_reused_unanswered",
        ),
        pytest.param(
            [
                AIMessage(
                    "",
                    tool_calls=[call("v")],
                    invalid_tool_calls=[
                        {"name": "lookup", "args": "{", "id": "i", "error": "JSON"}
                    ],
                ),
                ToolMessage("result v", tool_call_id="v"),
            ],
            id="invalid_call_unanswered",
        ),
        pytest.param([ToolMessage("result", tool_call_id="gone")], id="orphan_result"),
        pytest.param(
            [AIMessage("", additional_kwargs={"tool_calls": [raw("r1"), raw("r2")]})],
            id="chatopenai_raw_calls",
        ),
    ],
)
@pytest.mark.parametrize("budget", [2000, 30, 1])
def test_odd_tool_turns_grow_to_a_valid_request(chat: list[BaseMessage], budget: int) -> None:
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    messages: list[BaseMessage] = [SystemMessage("s"), HumanMessage("look it up " * 20)]
    for message in chat:  # each prefix, the unanswered call last at some point
        messages.append(message)
        checked_trim(trimmer, messages, budget)
    messages.append(HumanMessage("and now?"))
    checked_trim(trimmer, messages, budget)


def test_openai_dicts_with_a_missing_tool_message() -> None:
    chat: list[Any] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [raw("c1"), raw("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {"role": "user", "content": "n"},
    ]
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    for _ in range(2):
        result = trimmer.trim(chat)
        assert wire_problems(result.messages) == []
        assert result.tokens_after == COUNTER.count_messages(result.messages)
        assert result.decisions[2].rule == "unanswered_tool_call"
    assert chat[2]["tool_calls"] == [raw("c1"), raw("c2")]


def test_batch_and_abatch_over_prefixes_of_one_chat_trim_like_fresh_trimmers() -> None:
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("q " * 40),
        AIMessage("", tool_calls=[call("a"), call("b")]),
        ToolMessage("ra " * 30, tool_call_id="a"),
        ToolMessage("rb " * 30, tool_call_id="b"),
        AIMessage("ans " * 30),
        HumanMessage("n " * 20),
        AIMessage("", tool_calls=[call("c")]),
        ToolMessage("rc", tool_call_id="c"),
    ]
    prefixes = [chat[:n] for n in range(2, len(chat) + 1)]
    trimmer = PriorityTrimmer(300, token_counter=COUNTER)
    fresh = [PriorityTrimmer(300, token_counter=COUNTER).trim(p).messages for p in prefixes]
    assert trimmer.batch(prefixes) == fresh
    assert asyncio.run(trimmer.abatch(prefixes)) == fresh
    assert all(wire_problems(sent) == [] for sent in fresh)


SPOILS: dict[str, Callable[[list[BaseMessage]], None]] = {
    "int_content": lambda chat: setattr(chat[2], "content", 5),
    "part_without_text": lambda chat: chat[1].content.__setitem__(0, {"type": "text"}),
    "part_appended": lambda chat: chat[1].content.append({"type": "text"}),
    "string_to_bad_list": lambda chat: setattr(chat[2], "content", [{"type": "text"}]),
}


@pytest.mark.parametrize("spoil", SPOILS.values(), ids=SPOILS.keys())
def test_content_spoiled_in_place_on_an_old_message_is_named(
    spoil: Callable[[list[BaseMessage]], None],
) -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage([{"type": "text", "text": "hi"}]),
        AIMessage("old answer"),
        HumanMessage("next"),
    ]
    trimmer.trim(chat)
    spoil(chat)
    with pytest.raises(ValueError, match=r"^Message [12] \((human|ai)\)"):
        trimmer.trim([*chat, AIMessage("new")])


def test_random_growth_with_edits_trims_like_a_fresh_trimmer() -> None:
    """Seeded: turns, parallel calls with some results missing, removals, calls added to or
    taken from old messages in place and late results, trimmed after every step under cuts."""
    rng = random.Random(1)
    issued = 0
    for _ in range(40):
        budget = rng.choice([150, 300, 600, 2000])
        trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
        chat: list[BaseMessage] = [SystemMessage("sys " * 5)]
        for step in range(25):
            draw = rng.random()
            calling = [m for m in chat if isinstance(m, AIMessage) and m.tool_calls]
            if draw < 0.25:
                chat.append(HumanMessage(f"user {step} " + "w " * rng.randint(1, 40)))
            elif draw < 0.45:
                ids = [f"c{issued + i}" for i in range(rng.randint(1, 3))]
                issued += len(ids)
                chat.append(AIMessage(rng.choice(["", "calling"]), tool_calls=list(map(call, ids))))
                chat += [
                    ToolMessage("r " * rng.randint(1, 60), tool_call_id=i)
                    for i in ids
                    if rng.random() < 0.8
                ]
            elif draw < 0.6:
                chat.append(AIMessage("answer " * rng.randint(1, 30)))
            elif draw < 0.7 and len(chat) > 3:
                del chat[rng.randrange(1, len(chat))]
            elif draw < 0.78 and calling:
                edited = rng.choice(calling)
                if rng.random() < 0.5:
                    edited.tool_calls.append(call(f"c{issued}"))
                    issued += 1
                else:
                    edited.tool_calls = edited.tool_calls[:-1]
            elif draw < 0.85 and calling:
                late = rng.choice(calling).tool_calls[0]["id"]
                chat.append(ToolMessage("late", tool_call_id=late))
            before = copy.deepcopy(chat)
            result = trimmer.trim(chat)
            fresh = PriorityTrimmer(budget, token_counter=COUNTER).trim(chat)
            assert result.messages == fresh.messages
            assert result.tokens_after == COUNTER.count_messages(result.messages)
            assert chat == before
            # (a result added twice, with the first, is sent twice: the simulator takes it)
            assert all("second result" in p for p in wire_problems(result.messages))


# --- defects ------------------------------------------------------------------------------------


def test_calls_emptied_in_place_are_not_sent_from_additional_kwargs() -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    asked = AIMessage("", additional_kwargs={"tool_calls": [raw("a")]})  # as ChatOpenAI builds it
    chat = asked_and_answered(asked)
    checked_trim(trimmer, chat)
    asked.tool_calls = []  # the user strips the calls; its result is then an orphan, dropped
    assert wire_problems(trimmer.trim(chat).messages) == []
    stripped = checked_trim(trimmer, chat)
    assert [d.rule for d in stripped.decisions[2:4]] == [
        "unanswered_tool_call",
        "orphan_tool_result",
    ]
    assert "tool_calls" not in stripped.messages[2].additional_kwargs


RAW_EDITS: dict[str, Callable[[list[BaseMessage]], None]] = {
    "raw_removed": lambda chat: chat[2].additional_kwargs.pop("tool_calls"),
    "raw_put_back": lambda chat: chat[2].additional_kwargs.update(tool_calls=[raw("a")]),
    "raw_added_to_a_plain_answer": lambda chat: chat[4].additional_kwargs.update(
        tool_calls=[raw("z")]
    ),
    "kwargs_replaced": lambda chat: setattr(chat[4], "additional_kwargs", {"refusal": None}),
    "calls_set_again": lambda chat: setattr(chat[2], "tool_calls", [call("a")]),
}


def test_raw_calls_edited_in_place_between_calls_are_seen() -> None:
    """Each edit of an AIMessage's raw calls, between calls of one trimmer, trims as a fresh
    trimmer does (checked_trim), and never sends a raw call unanswered."""
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    asked = AIMessage("", additional_kwargs={"tool_calls": [raw("a")]})
    chat = asked_and_answered(asked, AIMessage("Found it.", additional_kwargs={"refusal": None}))
    checked_trim(trimmer, chat)
    asked.tool_calls = []
    checked_trim(trimmer, chat)
    for edit in RAW_EDITS.values():
        edit(chat)
        checked_trim(trimmer, chat)
        chat.append(AIMessage("More."))
        checked_trim(trimmer, chat)
    assert asked.tool_calls == [call("a")]


def test_a_chat_message_result_renamed_in_place_is_seen() -> None:
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    result = ChatMessage(content="result a", role="tool", additional_kwargs={"tool_call_id": "a"})
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a up"),
        AIMessage("Checking.", tool_calls=[call("a")]),
        result,
        HumanMessage("next"),
    ]
    assert trimmer.trim(chat).decisions[2].rule == "fits"
    result.additional_kwargs["tool_call_id"] = "other"
    fresh = PriorityTrimmer(2000, token_counter=COUNTER).trim(chat)
    assert fresh.decisions[2].rule == "unanswered_tool_call"
    assert [d.rule for d in trimmer.trim(chat).decisions] == [d.rule for d in fresh.decisions]


@pytest.mark.parametrize(
    "names", [{"tool_call_id": "a"}, {}], ids=["naming_its_call", "naming_none"]
)
def test_a_chat_message_result_without_its_call_is_dropped_as_an_orphan(
    names: dict[str, Any],
) -> None:
    """Sent as a plain message before (OpenAI: 400), where a ToolMessage is dropped; also once
    its call is removed between two calls of one trimmer."""
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    result = ChatMessage(content="result a", role="tool", additional_kwargs=names)
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a up"),
        AIMessage("Checking.", tool_calls=[call("a")]),
        result,
        HumanMessage("next"),
    ]
    trimmer.trim(chat)  # (ChatOpenAI sends a ChatMessage without its tool_call_id)
    del chat[2]  # its AIMessage removed
    for trimmed in (checked_trim(trimmer, chat), PriorityTrimmer(2000).trim(chat)):
        decision = trimmed.decisions[2]
        assert (decision.action, decision.rule) == ("dropped", "orphan_tool_result")
        assert result not in trimmed.messages


def test_each_gap_is_warned_of_once_per_trimmer(caplog: pytest.LogCaptureFixture) -> None:
    """A thread keeps an unanswered call and an orphan result in its history: each is warned of
    on the first call only (it was on every call), a new gap once more, and by another
    trimmer again."""
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a and b up"),
        AIMessage("Checking.", tool_calls=[call("a"), call("b")]),
        ToolMessage("result a", tool_call_id="a"),  # b's result was removed
        ToolMessage("result z", tool_call_id="z"),  # an orphan
        HumanMessage("next"),
    ]

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for turn in range(4):
            trimmer.trim(chat)
            chat += [AIMessage(f"answer {turn}"), HumanMessage(f"question {turn}")]
        assert len(warnings()) == 2
        assert warnings()[0].startswith("Left out 1 tool call(s) that no tool message answers")
        assert "index(es) [2]" in warnings()[0]
        assert warnings()[1].startswith("Dropped 1 tool result(s)") and "[4]" in warnings()[1]
        chat += [AIMessage("", tool_calls=[call("c")]), HumanMessage("and c?")]  # a new gap
        trimmer.trim(chat)
        trimmer.trim(chat)
        assert len(warnings()) == 3 and f"[{len(chat) - 2}]" in warnings()[2]
        PriorityTrimmer(2000, token_counter=COUNTER).trim(chat)
        assert len(warnings()) == 5


def streamed_calls(*ids: str) -> AIMessageChunk:
    """Calls as a streaming caller adds them up (``full = full + chunk``)."""
    chunks = [
        {"name": "lookup", "args": "{}", "id": id_, "index": n, "type": "tool_call_chunk"}
        for n, id_ in enumerate(ids)
    ]
    return AIMessageChunk(content="Checking.", tool_call_chunks=chunks)


@pytest.mark.parametrize(
    "calls",
    [
        pytest.param(AIMessage("Checking.", tool_calls=[call("a"), call("b")]), id="message"),
        pytest.param(streamed_calls("a", "b"), id="chunk"),
    ],
)
def test_the_copy_without_a_call_stays_without_it_through_a_round_trip(
    calls: AIMessage,
) -> None:
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a and b up"),
        calls,
        ToolMessage("result a", tool_call_id="a"),
        HumanMessage("next"),
    ]
    sent = checked_trim(PriorityTrimmer(2000, token_counter=COUNTER), chat).messages
    assert wire_problems(messages_from_dict(messages_to_dict(sent))) == []


# --- real agents against the simulator ---------------------------------------------------------


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 40


@tool
def stock(key: str) -> str:
    """Tells the stock level of a key."""
    return f"stock of {key}: " + "level " * 40


@pytest.mark.parametrize(
    "removed", ["one_parallel_result", "both_parallel_results", "the_calling_message"]
)
def test_agent_after_a_removal_sends_a_valid_prompt(sim: RunningSimulator, removed: str) -> None:
    """And with no elision marker: what a removal leaves out is no cut for the budget (the
    marker said earlier messages were left out to keep the prompt short)."""
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=5000)
    graph = create_agent(
        build_chat_model(settings),
        tools=[lookup, stock],
        system_prompt="You are the inventory assistant.",
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    for i in range(2):
        graph.invoke({"messages": [HumanMessage(f'Use lookup and stock for "k{i}".')]}, config)
    messages = graph.get_state(config).values["messages"]
    parallel = next(m for m in messages if isinstance(m, AIMessage) and len(m.tool_calls) == 2)
    results = [m for m in messages if isinstance(m, ToolMessage)]
    gone = {
        "one_parallel_result": results[:1],
        "both_parallel_results": results[:2],
        "the_calling_message": [parallel],
    }[removed]
    graph.update_state(config, {"messages": [RemoveMessage(id=str(m.id)) for m in gone]})
    recorder = Recorder()
    graph.invoke(
        {"messages": [HumanMessage("Thanks; now summarise.")]}, {**config, "callbacks": [recorder]}
    )
    assert recorder.prompts and all(wire_problems(prompt) == [] for prompt in recorder.prompts)
    assert not any(m.content == MARKER_TEXT for prompt in recorder.prompts for m in prompt)
    dropped = {"one_parallel_result": 0, "both_parallel_results": 1, "the_calling_message": 2}
    assert recorder.trims and recorder.trims[0].dropped_messages == dropped[removed]


def agent_stopping_before_its_tools(sim: RunningSimulator) -> tuple[Any, Any, Recorder]:
    """A trimmed ``create_agent`` on the simulator, interrupted before each tool step, its run
    config (one thread) and what records its prompts."""
    settings = settings_of(sim)
    graph = create_agent(
        build_chat_model(settings),
        tools=[lookup, stock],
        system_prompt="You are the inventory assistant.",
        middleware=[TrimmingMiddleware(PriorityTrimmer.from_settings(settings, budget=5000))],
        checkpointer=InMemorySaver(),
        interrupt_before=["tools"],
    )
    recorder = Recorder()
    return graph, {"configurable": {"thread_id": "t"}, "callbacks": [recorder]}, recorder


def test_agent_asked_again_while_its_calls_wait_sends_a_valid_prompt(
    sim: RunningSimulator,
) -> None:
    """Interrupted before its tools run, the agent gets a new question: the waiting calls are
    left out of the prompt; resumed, the next calls run and the first ones stay left out."""
    graph, config, recorder = agent_stopping_before_its_tools(sim)
    graph.invoke({"messages": [HumanMessage('Use lookup and stock for "k1".')]}, config)
    graph.invoke({"messages": [HumanMessage("Never mind; what is 2+2?")]}, config)
    graph.invoke(None, config)  # the second question's calls run
    waiting = graph.get_state(config).values["messages"][1]
    assert len(waiting.tool_calls) == 2  # never answered
    assert len(recorder.prompts) == 3
    assert all(wire_problems(prompt) == [] for prompt in recorder.prompts)
    assert all(waiting.id not in {m.id for m in prompt} for prompt in recorder.prompts[1:])


def test_a_late_result_is_not_sent_apart_from_its_call(sim: RunningSimulator) -> None:
    """A user message sent while the tool ran: the result is sent right after its call (the
    input is not changed), even when everything fits; the simulator answered 400 before."""
    settings = settings_of(sim)
    chat: list[BaseMessage] = [
        SystemMessage("s"),
        HumanMessage("look a up"),
        AIMessage("", tool_calls=[call("a")]),
        HumanMessage("still there?"),  # sent while the tool ran
        ToolMessage("result a", tool_call_id="a"),
    ]
    trimmed = checked_trim(PriorityTrimmer(2000, token_counter=COUNTER), chat)
    assert trimmed.messages == [chat[0], chat[1], chat[2], chat[4], chat[3]]
    assert [d.rule for d in trimmed.decisions] == [*["fits"] * 4, "late_tool_result"]
    # Nothing dropped or shortened, yet not the input: whoever sends the input unless the
    # trim changed it must send this instead.
    assert (trimmed.dropped_messages, trimmed.shortened_messages) == (0, 0)
    assert trimmed.moved_messages == 1 and trimmed.changed
    build_chat_model(settings).invoke(trimmed.messages)  # openai.BadRequestError before


def late_parallel_turns() -> Iterator[list[BaseMessage]]:
    """A conversation growing by one message at a time: parallel calls answered one before
    and one after a user message, then more turns, one more with a late result."""
    chat: list[BaseMessage] = [SystemMessage("You are the inventory assistant.")]
    steps: list[BaseMessage] = [
        HumanMessage("look a and b up " + "please " * 30),
        AIMessage("Looking.", tool_calls=[call("a"), call("b")]),
        ToolMessage("result a " * 40, tool_call_id="a"),
        HumanMessage("and quickly, please"),  # sent while b ran
        ToolMessage("result b " * 40, tool_call_id="b"),
        AIMessage("Both found: " + "detail " * 40),
        HumanMessage("now c " + "please " * 30),
        AIMessage("", tool_calls=[call("c")]),
        HumanMessage("hello?"),
        ToolMessage("result c " * 40, tool_call_id="c"),
        AIMessage("Found c: " + "detail " * 40),
        HumanMessage("thanks; what was b?"),
        AIMessage("b was " + "detail " * 40),
        HumanMessage("and a?"),
    ]
    for step in steps:
        chat.append(step)
        yield chat


@pytest.mark.parametrize("budget", [5000, 400])
def test_a_growing_conversation_with_late_results_sends_valid_stable_prompts(
    sim: RunningSimulator, budget: int
) -> None:
    """Every trim (one trimmer, as an agent calls it) is sent to the simulator by ChatOpenAI;
    where everything fits, each call's prompt begins with the previous call's (the server's
    cached prefix holds) once the late result has come."""
    settings = settings_of(sim)
    model = build_chat_model(settings)
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    previous: list[BaseMessage] = []
    waited = False  # whether the previous call had a call waiting for its result
    for chat in late_parallel_turns():
        trimmed = checked_trim(trimmer, chat, budget)
        if isinstance(chat[-1], HumanMessage):
            model.invoke(trimmed.messages)  # 400 before: a result sent after a user message
        rules = {d.rule for d in trimmed.decisions}
        waits = "unanswered_tool_call" in rules
        if budget == 5000 and not waits and not waited and trimmed.decisions[-1].rule == "fits":
            assert trimmed.messages[: len(previous)] == previous
        previous, waited = trimmed.messages, waits
    late = [d.index for d in trimmed.decisions if d.rule == "late_tool_result"]
    assert set(late) <= {5, 10} and (budget < 5000 or late == [5, 10])
    assert [chat[i].tool_call_id for i in (5, 10)] == ["b", "c"]


def test_agent_with_a_user_message_sent_while_its_tool_ran_sends_valid_prompts(
    sim: RunningSimulator,
) -> None:
    """Interrupted before its tools, the agent gets a user message in its state, then the
    tools run: its next prompt sends the result right after the call (the simulator answered
    400 before, the middleware sent the request as it was)."""
    graph, config, recorder = agent_stopping_before_its_tools(sim)
    graph.invoke({"messages": [HumanMessage('Use lookup and stock for "k1".')]}, config)
    graph.update_state(config, {"messages": [HumanMessage("Still there?")]})
    graph.invoke(None, config)  # the tools run, then the model is called
    state = graph.get_state(config).values["messages"]
    assert [type(m).__name__ for m in state[:5]] == [
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
        "ToolMessage",
        "ToolMessage",
    ]
    assert len(recorder.prompts) == 2
    assert all(wire_problems(prompt) == [] for prompt in recorder.prompts)
    assert [m.type for m in recorder.prompts[1][:6]] == [
        "system",
        "human",
        "ai",
        "tool",
        "tool",
        "human",
    ]
