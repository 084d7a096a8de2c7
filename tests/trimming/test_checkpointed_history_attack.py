"""Attacks on a checkpointed agent's history read back as new objects, from the user's side.

The analysis of a conversation is also remembered by value (``_rounds.AnalysisMemo``) and
shortened texts by their type, ids and text (``_shortening.MessageShortener``): a trim of
copies read back must decide exactly as a fresh trimmer does. Each defect found has a test that
failed on 7ed3e51; the others pin what held.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
import tracemalloc
import warnings
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from support.conversations import GrowingConversation, figures, read_back
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware, TrimResult, recall_tool
from agent_latency.trimming._request import RequestExtras
from agent_latency.trimming._rounds import BY_VALUE_BYTES


def _two_lookups(first: dict[str, Any], second: dict[str, Any]) -> list[BaseMessage]:
    """A history of two tool calls with these arguments, ids fixed (a thread's, read back)."""
    messages: list[BaseMessage] = [
        SystemMessage("Answer from the records.", id="s"),
        HumanMessage("What do the records say?", id="h"),
    ]
    for n, args in enumerate([first, second]):
        call = {"name": "lookup", "args": args, "id": f"c{n}", "type": "tool_call"}
        messages += [
            AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(f"record {n}: " + "shelf " * 30, tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return [*messages, HumanMessage("And the total?", id="q")]


def _trimmed_alike(seen: list[BaseMessage], then: list[BaseMessage], budget: int = 3000) -> None:
    """A trimmer that trimmed ``seen`` trims ``then`` as a fresh trimmer does."""
    warm = PriorityTrimmer(budget, token_counter=TokenCounter())
    warm.trim(seen)

    trimmed = warm.trim(then)

    fresh = PriorityTrimmer(budget, token_counter=TokenCounter()).trim(then)
    assert figures(trimmed, then) == figures(fresh, then)
    assert trimmed.message_tokens == fresh.message_tokens


SAME = {"q": "a"}
# Per case, the arguments of both calls as analysed, then as read back: equal (==) in the first
# call, but sent otherwise: each case failed on 7ed3e51, counted as the analysed call was.
SENT_OTHERWISE: dict[str, tuple[dict[str, Any], ...]] = {
    # With the second call's arguments changed too: the change is found, the type before it was
    # taken over.
    "1 then 1.0, a later call changed": ({"n": 1}, {"q": "a"}, {"n": 1.0}, {"q": "a longer one"}),
    # json.dumps writes keys in their order.
    "keys in another order": ({"type": 1, "name": ""}, SAME, {"name": "", "type": 1}, SAME),
    # Sent as str() writes it.
    "a Decimal written otherwise": ({"n": Decimal("1.0")}, SAME, {"n": Decimal("1.00000")}, SAME),
}


@pytest.mark.parametrize("args", SENT_OTHERWISE.values(), ids=SENT_OTHERWISE)
def test_arguments_equal_but_sent_otherwise_are_counted_as_sent(
    args: tuple[dict[str, Any], ...],
) -> None:
    seen_first, seen_second, first, second = args
    _trimmed_alike(_two_lookups(seen_first, seen_second), read_back(_two_lookups(first, second)))


def _rich() -> list[BaseMessage]:
    """A history of every message shape the trimmer takes, ids fixed (a thread's)."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUFB" * 200}}
    block = {"type": "tool_result", "tool_use_id": "c0", "content": "the shelves " * 30}
    return [
        SystemMessage("Answer from the records.", id="s"),
        HumanMessage([{"type": "text", "text": "What is on the photo?"}, image], id="h"),
        AIMessage("", tool_calls=[{"name": "look", "args": {"n": 1}, "id": "c0"}], id="a0"),
        ToolMessage("shelf " * 40, tool_call_id="c0", id="t0"),
        HumanMessage([block], id="b"),
        ChatMessage("a note " * 20, role="user", id="cm"),
        FunctionMessage("42 boxes", name="count", id="f"),
        AIMessage(
            "",
            invalid_tool_calls=[{"name": "look", "args": "{oops", "id": "c1", "error": None}],
            id="a1",
        ),
        ToolMessage("not parsed", tool_call_id="c1", id="t1"),
        AIMessageChunk("partial " * 10, id="k"),
        Noted("a subclass " * 10, id="n"),
        AIMessage("done " * 30, id="d"),
        HumanMessage("And the total?", id="q"),
    ]


class Noted(HumanMessage):
    """A user's own kind of user message."""


def _role(messages: list[BaseMessage]) -> None:
    messages[5] = ChatMessage(messages[5].content, role="assistant", id="cm")


def _function_name(messages: list[BaseMessage]) -> None:
    messages[6] = FunctionMessage(messages[6].content, name="total", id="f")


def _chunk_for_message(messages: list[BaseMessage]) -> None:
    messages[11] = AIMessageChunk(messages[11].content, id="d")


def _message_for_chunk(messages: list[BaseMessage]) -> None:
    messages[9] = AIMessage(messages[9].content, id="k")


def _id(messages: list[BaseMessage]) -> None:
    messages[3] = messages[3].model_copy(update={"id": "other"})


def _image(messages: list[BaseMessage]) -> None:
    messages[1].content[1]["image_url"]["url"] += "QUFB"  # type: ignore[index]


def _block_text(messages: list[BaseMessage]) -> None:
    messages[4].content[0]["content"] = "the boxes " * 30  # type: ignore[index]


def _invalid_args(messages: list[BaseMessage]) -> None:
    messages[7].invalid_tool_calls[0]["args"] = "{oops, again"  # type: ignore[attr-defined]


def _raw_calls(messages: list[BaseMessage]) -> None:
    raw = {"id": "r", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    messages[11].additional_kwargs["tool_calls"] = [raw]


def _plain_for_subclass(messages: list[BaseMessage]) -> None:
    messages[10] = HumanMessage(messages[10].content, id="n")


def _part_keys(messages: list[BaseMessage]) -> None:
    part = messages[1].content[0]  # type: ignore[index]
    messages[1].content[0] = {"text": part["text"], "type": "text"}  # type: ignore[index]


def _none_content(messages: list[BaseMessage]) -> None:
    messages[11] = AIMessage.model_construct(**{**messages[11].__dict__, "content": None})


READ_BACK_OTHERWISE: dict[str, Callable[[list[BaseMessage]], None]] = {
    "as it was": lambda messages: None,
    "a ChatMessage's role": _role,
    "a FunctionMessage's name": _function_name,
    "an AIMessageChunk for an AIMessage": _chunk_for_message,
    "an AIMessage for an AIMessageChunk": _message_for_chunk,
    "a message's id": _id,
    "a base64 image": _image,
    "an Anthropic tool_result block's text": _block_text,
    "invalid tool call arguments": _invalid_args,
    "raw tool calls in additional_kwargs": _raw_calls,
    "a HumanMessage for a subclass of it": _plain_for_subclass,
    "a content part's keys in another order": _part_keys,
    "content None (model_construct)": _none_content,
}


@pytest.mark.parametrize("edit", READ_BACK_OTHERWISE.values(), ids=READ_BACK_OTHERWISE)
def test_every_message_shape_read_back_otherwise_is_trimmed_as_a_fresh_trimmer_does(
    edit: Callable[[list[BaseMessage]], None],
) -> None:
    for budget in (3000, 400):
        messages = read_back(_rich())
        edit(messages)
        _trimmed_alike(_rich(), messages, budget)


# --- The real thing: agents with a checkpointer, over HTTP to the simulator --------------------


class FreshlyChecked(PriorityTrimmer):
    """A trimmer that trims every request a fresh trimmer of its options trims too, and notes
    where the two differ (an agent's middleware logs a failed trim and sends untrimmed)."""

    differences: list[str]
    changed: list[bool]  # per trim, whether it left anything out or shortened it

    def _trim(self, value: object, request: RequestExtras, *, chooses_tools: bool) -> TrimResult:
        result = super()._trim(value, request, chooses_tools=chooses_tools)
        options = dataclasses.replace(self.options, token_counter=TokenCounter())
        fresh = PriorityTrimmer._from_options(
            options, cut_budget=None if self._warns else self._cut_budget
        )
        inputs = list(value) if isinstance(value, list) else []
        again = fresh._trim(value, request, chooses_tools=chooses_tools)
        ours, theirs = figures(result, inputs), figures(again, inputs)
        if ours != theirs:
            FreshlyChecked.differences.append(f"{ours} != {theirs}")
        FreshlyChecked.changed.append(result.changed)
        return result


@pytest.fixture
def checked() -> Iterator[type[FreshlyChecked]]:
    FreshlyChecked.differences, FreshlyChecked.changed = [], []
    yield FreshlyChecked


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + " ".join(f"shelf {key}-{i} holds {i * 3} boxes" for i in range(40))


def _turns(graph: Any, config: dict[str, Any], asks: list[str]) -> None:
    for ask in asks:
        graph.invoke({"messages": [HumanMessage(ask)]}, config)


def _edited_between_turns(graph: Any, config: dict[str, Any]) -> None:
    """A user's cleanup between turns: a tool result removed, a question rewritten (same id)."""
    messages = graph.get_state(config).values["messages"]
    result = [m for m in messages if isinstance(m, ToolMessage)][1]
    asked = next(m for m in messages if isinstance(m, HumanMessage))  # the opening's
    rewritten = HumanMessage(str(asked.content) + " Also give the aisle.", id=asked.id)
    graph.update_state(config, {"messages": [RemoveMessage(id=str(result.id)), rewritten]})


@pytest.mark.parametrize("recall", [False, True], ids=["recall off", "recall on"])
def test_a_create_agent_with_a_checkpointer_trims_every_call_as_a_fresh_trimmer(
    sim: RunningSimulator,
    checked: type[FreshlyChecked],
    recall: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings_of(sim)
    trimmer = checked(600, token_counter=TokenCounter())
    graph = create_agent(
        build_chat_model(settings),
        tools=[lookup],
        system_prompt="You answer from the inventory.",
        middleware=[TrimmingMiddleware(trimmer, recall=recall)],
        checkpointer=InMemorySaver(),
    )
    ours: Any = {"configurable": {"thread_id": "ours"}}
    theirs: Any = {"configurable": {"thread_id": "theirs"}}
    asks = [f'Use lookup for "k{i}" please.' for i in range(4)]
    for config in (ours, theirs):  # two threads, the same questions, interleaved
        _turns(graph, config, asks[:2])
    _edited_between_turns(graph, ours)
    for config in (ours, theirs, ours):
        _turns(graph, config, asks[2:])

    assert checked.differences == []
    assert "Trimming failed" not in caplog.text
    assert len(checked.changed) >= 20 and any(checked.changed), checked.changed


def test_a_react_agent_hook_over_batched_and_streamed_threads_trims_as_a_fresh_trimmer(
    sim: RunningSimulator, checked: type[FreshlyChecked], caplog: pytest.LogCaptureFixture
) -> None:
    from langgraph.prebuilt import create_react_agent

    settings = settings_of(sim)
    hook = checked(600, token_counter=TokenCounter()).as_pre_model_hook(
        prompt="You answer from the inventory.", tools=[lookup]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
        graph = create_react_agent(
            build_chat_model(settings),
            [lookup, recall_tool(hook)],
            prompt="You answer from the inventory.",
            pre_model_hook=hook,
            checkpointer=InMemorySaver(),
        )
    configs: list[Any] = [{"configurable": {"thread_id": f"t{n}"}} for n in range(3)]

    async def turns() -> None:
        for i in range(3):  # the same questions in every thread, turn by turn
            ask = {"messages": [HumanMessage(f'Use lookup for "k{i}" please.')]}
            await graph.abatch([ask] * len(configs), configs)
        ask = {"messages": [HumanMessage("Which shelf holds the most?")]}
        async for _ in graph.astream_events(ask, configs[0], version="v2"):
            pass

    asyncio.run(turns())

    assert checked.differences == []
    assert "Trimming failed" not in caplog.text
    assert len(checked.changed) >= 18 and any(checked.changed), checked.changed


# --- One trimmer, many threads ------------------------------------------------------------------


def test_threads_trimming_copies_of_one_and_other_conversations_trim_as_fresh_trimmers() -> None:
    warm = PriorityTrimmer(700, token_counter=TokenCounter())
    differences: list[str] = []
    changed: list[bool] = []

    def trims(seed: int) -> None:
        conversation = GrowingConversation(seed)
        for step in range(30):
            conversation.grow()
            if step % 7 == 6:
                conversation.edit()
            messages = read_back(conversation.messages)
            fresh = PriorityTrimmer(700, token_counter=TokenCounter()).trim(messages)
            trimmed = warm.trim(messages)
            changed.append(trimmed.changed)
            if figures(trimmed, messages) != figures(fresh, messages):
                differences.append(f"seed {seed}, step {step}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often, inside the analysis too
    try:
        # Two threads grow the same conversation (one opening, by value), two others theirs.
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(trims, [5, 5, 6, 7]))
    finally:
        sys.setswitchinterval(interval)

    assert differences == []
    assert sum(changed) > 20


# --- Memory --------------------------------------------------------------------------------------


def test_histories_read_back_hold_bounded_bytes_once_gone() -> None:
    """Sixteen threads' histories of 6 MiB of photos each, read back and trimmed, then gone: the
    analysis remembered by value holds at most its byte cap of them (on 7ed3e51, all 96 MiB:
    its 16 conversations were bounded by count only)."""
    trimmer = PriorityTrimmer(3000, token_counter=TokenCounter(cache_size=1))
    mib = 1024 * 1024
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for thread in range(16):
            messages: list[BaseMessage] = [SystemMessage("Describe."), HumanMessage(f"{thread}")]
            for photo in range(6):
                data = f"{thread:02}{photo}" * (mib // 3)
                url = {"url": "data:image/png;base64," + data}
                look = [
                    {"type": "text", "text": "And this?"},
                    {"type": "image_url", "image_url": url},
                ]
                messages += [HumanMessage(look), AIMessage(f"Photo {photo} of thread {thread}.")]
            trimmer.trim(read_back(messages))
            del messages, url, look
        gc.collect()
        trimmer.trim([SystemMessage("Another."), HumanMessage("Hi")])  # lets the dead go
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert held < BY_VALUE_BYTES + 4 * mib, f"{held / mib:.0f} MiB"


class _Attachment:
    """A user's object inside a content part (weakly referable, to tell it is gone)."""


def test_a_message_that_dies_when_another_is_let_go_is_let_go_too() -> None:
    """A message kept alive only by another's fields (``additional_kwargs``), which the analysis
    holds until that other's death is noted: letting go of the one lets the other die, noted
    during the let-go. On 7ed3e51 that note, the same as the one being handled, was skipped as
    a duplicate: the dead message's fields (and its attachment) stayed held."""
    trimmer = PriorityTrimmer(3000, token_counter=TokenCounter())
    opening: list[BaseMessage] = [SystemMessage("Answer briefly."), HumanMessage("Hello")]
    attachment = _Attachment()
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    shown = HumanMessage([{"type": "text", "text": "look"}, {**part, "meta": attachment}])
    answer = AIMessage("Seen.", additional_kwargs={"about": shown})
    trimmer.trim([*opening, shown, answer])
    gone = weakref.ref(attachment)

    del shown, answer, attachment  # the answer dies; the analysis holds its fields, so `shown`
    for _ in range(2):
        trimmer.trim([SystemMessage("Another conversation."), HumanMessage("Hi")])

    assert gone() is None


def test_a_conversation_above_the_byte_caps_lets_no_other_thread_go() -> None:
    """A thread whose history outweighs the byte caps (a long video's frames) is not remembered
    by value nor its count by content, and lets no other thread's memory go: the next turn of
    another counts only its new messages, in a trim and in a count of the whole. On 7ed3e51
    the one entry heavier than a cap emptied that cache: the counter's by content (every other
    conversation's count by content tokenised again), and with the byte cap of the analysis by
    value, that too (each other thread's next turn re-read its whole history)."""
    trimmer = PriorityTrimmer(3000, token_counter=TokenCounter())
    counter = trimmer.token_counter
    ours = GrowingConversation(3)
    for _ in range(20):
        ours.grow()
    trimmer.trim(read_back(ours.messages))
    url = {"url": "data:image/png;base64," + "A" * BY_VALUE_BYTES}
    frames = [{"type": "text", "text": "What happens?"}, {"type": "image_url", "image_url": url}]
    trimmer.trim([SystemMessage("Describe the video."), HumanMessage(frames)])
    before = len(ours.messages)
    ours.grow()
    tokenized = counter.tokenized_messages

    trimmer.trim(read_back(ours.messages))
    counter.count_messages(read_back(ours.messages))

    assert counter.tokenized_messages - tokenized <= len(ours.messages) - before


# --- A constant opening before a history read back ---------------------------------------------


class _Counting(TokenCounter):
    """Counts how many messages it was asked to count (what reading a history anew takes)."""

    asked = 0

    def count_message(self, message: BaseMessage) -> int:
        self.asked += 1
        return super().count_message(message)


def test_a_history_read_back_after_constant_examples_is_read_only_where_new() -> None:
    """A system prompt and few-shot examples kept as constants, the history after them read back
    from a checkpointer at each turn (the last turn's objects still alive, as a result kept):
    it is read as little as when the examples are read back too, and the trims are a fresh
    trimmer's. On 7ed3e51 the opening known by identity kept the history from being looked up
    by value: every turn read it all again (65 messages at the last turn, against 4)."""
    examples: list[BaseMessage] = [
        SystemMessage("Answer from the records."),
        HumanMessage("Where is the ledger?"),
        AIMessage("On shelf 4."),
    ]
    counter, all_read_back = _Counting(), _Counting()
    trimmer = PriorityTrimmer(700, token_counter=counter)
    baseline = PriorityTrimmer(700, token_counter=all_read_back)
    conversation = GrowingConversation(4)
    asked = []
    for _ in range(30):
        conversation.grow()
        messages = [*examples, *read_back(conversation.messages)]
        counter.asked = all_read_back.asked = 0

        trimmed = trimmer.trim(messages)

        baseline.trim(read_back(messages))
        asked.append((counter.asked, all_read_back.asked))
        fresh = PriorityTrimmer(700, token_counter=TokenCounter()).trim(messages)
        assert figures(trimmed, messages) == figures(fresh, messages)
    assert all(ours <= theirs for ours, theirs in asked[1:]), asked
