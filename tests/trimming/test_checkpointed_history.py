"""A checkpointed agent's history: new message objects at each turn, equal to the last call's.

LangGraph reads a thread's messages back from its checkpointer at each new turn
(``create_agent`` with ``InMemorySaver`` does too), so the trimmer gets new objects, equal to
those it analysed the turn before. The analysis (``_rounds.AnalysisMemo``) takes over what it
worked out for the equal ones and works out only the new and the changed messages: trimmed as a
fresh trimmer trims them, with only the new messages counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from support.conversations import GrowingConversation, figures, read_back, same_facts
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware
from agent_latency.trimming._compaction import STUB
from agent_latency.trimming._rounds import AnalysisMemo, analysis


class NotingCounter(TokenCounter):
    """A token counter that notes how many messages it counted and texts it tokenised to cut
    (what shortening a message takes)."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0
        self.encoded = 0

    def count_message(self, message: BaseMessage) -> int:
        self.counted += 1
        return super().count_message(message)

    def encode(self, text: str) -> list[int]:
        self.encoded += 1
        return super().encode(text)


def grown(counter: TokenCounter | None = None) -> tuple[GrowingConversation, AnalysisMemo]:
    """A conversation grown over 40 calls, each analysed (by the memo returned) as a copy."""
    conversation = GrowingConversation(11)
    memo = AnalysisMemo(counter or TokenCounter())
    for _ in range(40):
        conversation.grow()
        memo.analyse(read_back(conversation.messages))
    return conversation, memo


def test_only_the_new_messages_of_a_history_read_back_are_counted() -> None:
    counter = NotingCounter()
    conversation, memo = grown(counter)
    before = len(conversation.messages)
    conversation.grow()
    messages = read_back(conversation.messages)
    counter.counted = 0

    facts, _ = memo.analyse(messages)

    assert counter.counted == len(messages) - before  # before: every message, each turn
    assert same_facts(facts, analysis(TokenCounter(), messages))


def _first(messages: list[BaseMessage], kind: type[BaseMessage]) -> BaseMessage:
    return next(m for m in messages[2:] if type(m) is kind and m.content)


def _content_of_equal_length(messages: list[BaseMessage]) -> None:
    message = _first(messages, AIMessage)
    message.content = "x" * len(message.text)


def _name_set(messages: list[BaseMessage]) -> None:
    _first(messages, AIMessage).name = "alice"


def _call_added(messages: list[BaseMessage]) -> None:
    message = next(m for m in messages[2:] if isinstance(m, AIMessage) and not m.tool_calls)
    message.tool_calls = [
        {"name": "search", "args": {"q": "door"}, "id": "new", "type": "tool_call"}
    ]


def _raw_calls_added(messages: list[BaseMessage]) -> None:
    # ChatOpenAI sends the raw calls an AIMessage without calls keeps in additional_kwargs.
    message = next(m for m in messages[2:] if isinstance(m, AIMessage) and not m.tool_calls)
    message.additional_kwargs = {"tool_calls": [{"id": "raw", "type": "function"}]}


def _result_renamed(messages: list[BaseMessage]) -> None:
    _first(messages, ToolMessage).tool_call_id = "nobody"  # type: ignore[attr-defined]


def _type_changed(messages: list[BaseMessage]) -> None:
    index = messages.index(_first(messages, AIMessage))
    messages[index] = HumanMessage(messages[index].content, id=messages[index].id)


def _role_changed(messages: list[BaseMessage]) -> None:
    message = _first(messages, ChatMessage)
    message.role = "assistant"  # type: ignore[attr-defined]


def _part_changed(messages: list[BaseMessage]) -> None:
    message = next(m for m in messages[2:] if isinstance(m.content, list))
    message.content[0]["text"] = "edited"  # type: ignore[index]


COPY_EDITS: dict[str, Callable[[list[BaseMessage]], None]] = {
    "content of the same length": _content_of_equal_length,
    "name set": _name_set,
    "tool call added": _call_added,
    "raw calls added": _raw_calls_added,
    "tool_call_id of a result": _result_renamed,
    "an AIMessage become a HumanMessage": _type_changed,
    "role of a ChatMessage": _role_changed,
    "text of a content part": _part_changed,
}


@pytest.mark.parametrize("edit", COPY_EDITS.values(), ids=COPY_EDITS)
def test_a_copy_that_differs_from_the_history_analysed_is_read_anew_where_it_differs(
    edit: Callable[[list[BaseMessage]], None],
) -> None:
    conversation, memo = grown()
    messages = read_back(conversation.messages)
    before = memo.analyse(read_back(conversation.messages))[0]
    edit(messages)

    facts = memo.analyse(messages)[0]

    assert same_facts(facts, analysis(TokenCounter(), messages))
    assert facts != before  # the edit mattered


def test_an_empty_list_filled_in_place_after_the_analysis_reaches_the_next_copy() -> None:
    # The analysis held the original's empty tool-call list, then the original got a call.
    conversation, memo = grown()
    quiet = next(
        m for m in conversation.messages[2:] if isinstance(m, AIMessage) and not m.tool_calls
    )
    quiet.tool_calls.append({"name": "search", "args": {}, "id": "late", "type": "tool_call"})
    messages = read_back(conversation.messages)

    facts = memo.analyse(messages)[0]

    assert same_facts(facts, analysis(TokenCounter(), messages))


def test_two_conversations_with_the_same_opening_each_trim_as_a_fresh_trimmer_does() -> None:
    opening: list[BaseMessage] = [SystemMessage("Answer briefly."), HumanMessage("Hello")]
    ours = [*opening, AIMessage("Hi! " + "door " * 60), HumanMessage("What is the code?")]
    theirs = [*opening, AIMessage("Hey. " + "lamp " * 60), HumanMessage("Which lamp?")]
    warm = PriorityTrimmer(60, token_counter=TokenCounter())
    for messages in [ours, theirs, ours, theirs]:
        copy = read_back(messages)
        fresh = PriorityTrimmer(60, token_counter=TokenCounter())

        assert figures(warm.trim(copy), copy) == figures(fresh.trim(copy), copy)


# --- The real thing: create_agent with a checkpointer, over HTTP to the simulator ---------------


def test_a_checkpointed_agent_counts_only_each_turns_new_messages(sim: RunningSimulator) -> None:
    settings = settings_of(sim)
    counter = NotingCounter()
    trimmer = PriorityTrimmer(400, token_counter=counter)
    agent = create_agent(
        build_chat_model(settings),
        tools=[],
        system_prompt="You answer from the notes.",
        middleware=[TrimmingMiddleware(trimmer, recall=False)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    counted = []
    for turn in range(12):
        counter.counted = 0
        note = f"Note {turn}: the shelves in aisle {turn} were restocked. " + "ok " * 20
        agent.invoke({"messages": [HumanMessage(note)]}, config)
        counted.append(counter.counted)

    history = agent.get_state(config).values["messages"]
    assert len(history) == 24
    # Each turn's trim counts the new user turn; the answer is counted by the next one. Before,
    # every turn counted its whole history read back: 1, 3, 5, ... 23 messages.
    assert counted[3:] == [2] * 9, counted


def test_a_copy_with_an_argument_equal_but_of_another_type_is_counted_exactly() -> None:
    # 1 == 1.0, but ChatOpenAI sends "1.0": an edit in place has this limit
    # (docs/reliability.md), a new object read back has not.
    def conversation(limit: object) -> list[BaseMessage]:
        call = {"name": "search", "args": {"limit": limit}, "id": "c1", "type": "tool_call"}
        return [
            SystemMessage("Answer briefly."),
            HumanMessage("How many?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage("3 found", tool_call_id="c1"),
            HumanMessage("And now?"),
        ]

    warm = PriorityTrimmer(3000, token_counter=TokenCounter())
    warm.trim(conversation(1))
    messages = conversation(1.0)

    trimmed = warm.trim(messages)

    fresh = PriorityTrimmer(3000, token_counter=TokenCounter()).trim(messages)
    assert trimmed.tokens_before == fresh.tokens_before
    assert trimmed.message_tokens == fresh.message_tokens


# --- Tool results shortened to the cap: once, not again at every turn --------------------------


def looked_up(rounds: int) -> list[BaseMessage]:
    """An agent's history: every round a lookup whose result is far above the tool-result cap."""
    messages: list[BaseMessage] = [SystemMessage("You answer from the records.")]
    for r in range(rounds):
        call = {"name": "lookup", "args": {"n": r}, "id": f"c{r}", "type": "tool_call"}
        record = f"record {r}: " + " ".join(f"shelf {r}-{i} holds {i * 7} boxes" for i in range(80))
        messages += [
            HumanMessage(f"What is in record {r}?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(record, tool_call_id=f"c{r}"),
            AIMessage(f"Record {r} lists 80 shelves."),
        ]
    return [*messages, HumanMessage("Which shelf holds the most?")]


def test_tool_results_read_back_are_not_shortened_again() -> None:
    counter = NotingCounter()
    trimmer = PriorityTrimmer(2000, token_counter=counter)
    first = trimmer.trim(looked_up(12))
    assert first.shortened_messages > 0 and counter.encoded > 0
    counter.encoded = 0
    messages = read_back(looked_up(12))

    again = trimmer.trim(messages)

    assert counter.encoded == 0  # before: every result above the cap cut anew, each turn
    fresh = PriorityTrimmer(2000, token_counter=TokenCounter()).trim(messages)
    assert figures(again, messages) == figures(fresh, messages)
    assert [m.content for m in again.messages] == [m.content for m in fresh.messages]


def _past_its_first_64_characters(messages: list[BaseMessage]) -> None:
    # Within the head a shortened copy keeps, past what tells texts apart before comparing.
    result = [m for m in messages if isinstance(m, ToolMessage)][-1]  # the latest: sent
    text = str(result.content)
    result.content = text[:100] + "X" + text[101:]


def _answered_call_renamed(messages: list[BaseMessage]) -> None:
    result = [m for m in messages if isinstance(m, ToolMessage)][-1]
    call = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls][-1]
    call.tool_calls[0]["id"] = result.tool_call_id = "renamed"  # type: ignore[attr-defined]


def _named(messages: list[BaseMessage]) -> None:
    [m for m in messages if isinstance(m, ToolMessage)][-1].name = "lookup"


RESULT_EDITS: dict[str, Callable[[list[BaseMessage]], None]] = {
    "a character past the first 64 (same length and ends)": _past_its_first_64_characters,
    "tool-call id": _answered_call_renamed,
    "name": _named,
}


@pytest.mark.parametrize("edit", RESULT_EDITS.values(), ids=RESULT_EDITS)
def test_a_tool_result_read_back_with_another_value_is_shortened_from_its_own_text(
    edit: Callable[[list[BaseMessage]], None],
) -> None:
    trimmer = PriorityTrimmer(2000, token_counter=TokenCounter())
    trimmer.trim(looked_up(12))
    messages = read_back(looked_up(12))
    edit(messages)

    again = trimmer.trim(messages)

    fresh = PriorityTrimmer(2000, token_counter=TokenCounter()).trim(messages)
    assert figures(again, messages) == figures(fresh, messages)
    assert [m.content for m in again.messages] == [m.content for m in fresh.messages]
    assert [m.__dict__ for m in again.messages] == [m.__dict__ for m in fresh.messages]


class StubCounter(TokenCounter):
    """A token counter that notes how many compaction stubs it counted (one per stub made)."""

    def __init__(self) -> None:
        super().__init__()
        self.stubs = 0

    def count_message(self, message: BaseMessage) -> int:
        self.stubs += str(message.content).startswith(STUB.split("{")[0])
        return super().count_message(message)


def test_tool_results_read_back_are_not_compacted_again() -> None:
    counter = StubCounter()
    trimmer = PriorityTrimmer(2000, token_counter=counter, compact_tool_results=True)
    first = trimmer.trim(looked_up(12))
    assert first.shortened_messages > 0 and counter.stubs > 0
    counter.stubs = 0
    messages = read_back(looked_up(12))

    again = trimmer.trim(messages)

    assert counter.stubs == 0  # before: every old result's stub made and counted anew, each turn
    fresh = PriorityTrimmer(2000, token_counter=TokenCounter(), compact_tool_results=True)
    expected = fresh.trim(messages)
    assert figures(again, messages) == figures(expected, messages)
    assert [m.__dict__ for m in again.messages] == [m.__dict__ for m in expected.messages]


@pytest.mark.parametrize("edit", RESULT_EDITS.values(), ids=RESULT_EDITS)
def test_a_tool_result_read_back_with_another_value_is_compacted_from_its_own_text(
    edit: Callable[[list[BaseMessage]], None],
) -> None:
    trimmer = PriorityTrimmer(2000, token_counter=TokenCounter(), compact_tool_results=True)
    trimmer.trim(looked_up(12))
    messages = read_back(looked_up(12))
    edit(messages)
    # The oldest result, compacted on every call: its stub keeps its first 120 characters.
    oldest = next(m for m in messages if isinstance(m, ToolMessage))
    text = str(oldest.content)
    oldest.content = text[:100] + "X" + text[101:]

    again = trimmer.trim(messages)

    fresh = PriorityTrimmer(2000, token_counter=TokenCounter(), compact_tool_results=True)
    expected = fresh.trim(messages)
    assert any("X" in str(m.content) for m in expected.messages if isinstance(m, ToolMessage))
    assert figures(again, messages) == figures(expected, messages)
    assert [m.__dict__ for m in again.messages] == [m.__dict__ for m in expected.messages]


def _stubs(messages: list[BaseMessage]) -> int:
    return sum(str(m.content).startswith(STUB.split("{")[0]) for m in messages)


def test_results_read_back_are_remembered_by_identity_only_when_sent() -> None:
    # Every result above the cap is planned at its copy's size, and most of them are then cut:
    # only those sent get a copy kept for their new objects (before: every one, at every turn).
    trimmer = PriorityTrimmer(2000, token_counter=TokenCounter())
    kept = looked_up(12)
    trimmer.trim(kept)
    entries = len(trimmer._shortener._cache)
    messages = read_back(looked_up(12))

    again = trimmer.trim(messages)

    assert again.dropped_messages > 0 and 0 < again.shortened_messages < 12
    assert len(trimmer._shortener._cache) - entries == again.shortened_messages
    assert kept  # alive until here: its entries stay


def test_results_read_back_are_remembered_by_identity_only_when_their_stub_is_sent() -> None:
    trimmer = PriorityTrimmer(1000, token_counter=TokenCounter(), compact_tool_results=True)
    kept = looked_up(24)
    trimmer.trim(kept)
    entries = len(trimmer.compactor._cache)
    messages = read_back(looked_up(24))

    again = trimmer.trim(messages)

    stubbed = sum(d.rule == "compacted" for d in again.decisions)
    assert again.dropped_messages > 0 and 0 < _stubs(again.messages) == stubbed
    assert len(trimmer.compactor._cache) - entries == stubbed
    assert kept


@pytest.mark.parametrize("compact", [False, True], ids=["shortened", "compacted"])
def test_a_copy_sent_is_the_same_object_while_the_messages_are(compact: bool) -> None:
    trimmer = PriorityTrimmer(1000, token_counter=TokenCounter(), compact_tool_results=compact)
    for messages in (looked_up(24), read_back(looked_up(24))):
        first = trimmer.trim(messages)
        again = trimmer.trim(messages)

        given = set(map(id, messages))
        assert [m for m in first.messages if id(m) not in given]  # copies were sent
        assert all(a is b for a, b in zip(first.messages, again.messages, strict=True))


def test_forty_threads_interleaved_read_back_count_what_one_thread_alone_would() -> None:
    # A service's threads take turns: between two turns of one, 39 others come in. Their
    # messages have ids, as LangGraph's add_messages gives them (openings alike otherwise).
    # One trimmer given every thread read back counts what a trimmer of each thread's own,
    # given its objects as kept, counts.
    shared = NotingCounter()
    trimmer = PriorityTrimmer(300, token_counter=shared)
    threads = [GrowingConversation(100 + t) for t in range(40)]
    alone = [PriorityTrimmer(300, token_counter=NotingCounter()) for _ in threads]
    for turn in range(4):
        for t, conversation in enumerate(threads):
            conversation.grow()
            for i, message in enumerate(conversation.messages):
                message.id = message.id or f"thread-{t}-{i}"
            own = alone[t].token_counter
            assert isinstance(own, NotingCounter)
            own.counted = shared.counted = 0

            alone[t].trim(list(conversation.messages))
            trimmer.trim(read_back(conversation.messages))

            # Before: a thread missed from the 17th on had its whole history counted anew.
            assert shared.counted == own.counted, (turn, t)
