"""Property tests: every trimming invariant holds on random agent conversations.

Conversations mix system messages (several, anywhere), user messages (or none at all), plain
answers, tool steps with one to three parallel calls, huge tool results, Chinese text, empty
content and list content with text and image parts. The options are random too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agent_latency.config import PRIORITY_CLASSES
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._rounds import analysis
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
EXAMPLES = settings(max_examples=500, deadline=None)
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}

# Strategies are built once: building them inside draws costs more than the trims themselves.
WORDS = st.sampled_from(["data", "agent", "数据", "用户请求", "🙂", "x=1;", "\n"])
SMALL_SIZES = st.integers(0, 60)
HUGE_SIZES = st.integers(0, 60) | st.integers(0, 1500)
PARALLEL_CALLS = st.integers(1, 3)
EVENTS = st.lists(st.sampled_from(["user", "ai", "tools", "tools", "system"]), max_size=20)


@st.composite
def texts(draw: st.DrawFn, sizes: st.SearchStrategy[int] = SMALL_SIZES) -> str:
    return (draw(WORDS) + " ") * draw(sizes)


TEXTS = texts()
HUGE_TEXTS = texts(HUGE_SIZES)


@st.composite
def contents(draw: st.DrawFn) -> str | list[Any]:
    text = draw(TEXTS)
    kind = draw(CONTENT_KINDS)
    if kind == "parts":
        return [{"type": "text", "text": text}, IMAGE]
    return [] if kind == "empty_parts" else text


CONTENT_KINDS = st.sampled_from(["text", "text", "parts", "empty_parts"])
CONTENTS = contents()


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    """A well-formed agent conversation: every tool call answered, every result requested."""
    messages: list[BaseMessage] = []
    if draw(st.booleans()):
        messages.append(SystemMessage(draw(TEXTS)))
    calls = 0
    for event in draw(EVENTS):
        if event == "user":
            messages.append(HumanMessage(draw(CONTENTS)))
        elif event == "ai":
            messages.append(AIMessage(draw(CONTENTS)))
        elif event == "system":
            messages.append(SystemMessage(draw(TEXTS)))
        else:
            ids = [f"call_{calls + k}" for k in range(draw(PARALLEL_CALLS))]
            calls += len(ids)
            requests = [{"name": "search", "args": {"q": draw(TEXTS)}, "id": i} for i in ids]
            messages.append(AIMessage(draw(TEXTS), tool_calls=requests))
            messages += [ToolMessage(draw(HUGE_TEXTS), tool_call_id=i) for i in ids]
    return messages


@st.composite
def trimmers(draw: st.DrawFn) -> PriorityTrimmer:
    budget = draw(st.integers(40, 3000))
    return PriorityTrimmer(
        budget,
        priority_order=draw(st.permutations(PRIORITY_CLASSES)),
        keep_system=draw(st.booleans()),
        keep_latest_user=draw(st.booleans()),
        history_keep_head=draw(st.integers(0, 3)),
        history_keep_tail=draw(st.integers(0, 3)),
        max_tool_result_tokens=draw(st.none() | st.integers(32, 800)),
        prefix_stable=draw(st.booleans()),
        prefix_step_tokens=draw(st.none() | st.integers(1, budget)),
        token_counter=COUNTER,
    )


@dataclass
class Layout:
    """What the rules say about a conversation, worked out independently of the trimmer."""

    latest_user: int
    must_keep: set[int]
    tool_units: list[tuple[int, ...]]  # optional units after the latest user message
    classes: dict[int, str]


def layout(messages: list[BaseMessage], trimmer: PriorityTrimmer) -> Layout:
    facts = analysis(trimmer.token_counter, messages)
    added = added_by_a_tool(messages, facts.orphans)
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage) and i not in added]
    latest_user = humans[-1] if humans else -1
    units = facts.units
    classes: dict[int, str] = {}
    for unit in units:
        first = unit.indices[0]
        name = (
            "system"
            if unit.kind == "system"
            else "latest_user"
            if first == latest_user
            else "tool_result"
            if first > latest_user
            else "history"
        )
        classes.update(dict.fromkeys(unit.indices, name))
    must_keep = {i for i in classes if classes[i] == "system" and trimmer.options.keep_system}
    if trimmer.options.keep_latest_user and latest_user >= 0:
        must_keep.add(latest_user)
    turn = [u.indices for u in units if classes[u.indices[0]] == "tool_result"]
    tool_calls = [u.indices for u in units if u.kind == "tool_call" and u.indices in turn]
    if tool_calls:  # the newest, with the images its tool added after it
        must_keep.update(tool_calls[-1])
        must_keep.update(i for i in added if i > tool_calls[-1][0])
    optional = [u for u in turn if not must_keep.issuperset(u)]
    return Layout(latest_user, must_keep, optional, classes)


def added_by_a_tool(messages: list[BaseMessage], orphans: list[int]) -> set[int]:
    """The user messages a tool added: with an image, right after a tool result answering a
    call, a tool call or another such message (docs/trimming.md, "Classes")."""
    added: set[int] = set()
    for i, message in enumerate(messages[1:], 1):
        before = messages[i - 1]
        after_a_tool = (
            (isinstance(before, ToolMessage) and i - 1 not in orphans)
            or (
                isinstance(before, AIMessage)
                and bool(before.tool_calls or before.invalid_tool_calls)
            )
            or i - 1 in added
        )
        content = message.content
        image = isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") != "text" for part in content
        )
        if isinstance(message, HumanMessage) and image and after_a_tool:
            added.add(i)
    return added


def kept(outcome: TrimResult) -> set[int]:
    return {d.index for d in outcome.decisions if d.action != "dropped"}


@EXAMPLES
@given(conversations(), trimmers())
def test_inputs_are_never_mutated_and_survivors_keep_their_order(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    before = [m.model_dump() for m in messages]
    outcome = trimmer.trim(messages)
    assert [m.model_dump() for m in messages] == before
    survivors = [d for d in outcome.decisions if d.action != "dropped"]
    # In input order, but recalled history (docs/trimming.md, Cache-first cuts) is sent right
    # before the latest user message, after the cached prefix, in its own order.
    recalled = [d for d in survivors if d.rule == "recalled"]
    if recalled:
        question = next(d.index for d in survivors if d.priority_class == "latest_user")
        rest = [d for d in survivors if d.rule != "recalled"]
        survivors = [
            *(d for d in rest if d.index < question),
            *recalled,
            *(d for d in rest if d.index >= question),
        ]
    assert len(survivors) == len(outcome.messages)
    for decision, sent in zip(survivors, outcome.messages, strict=True):
        original = messages[decision.index]
        if decision.action == "kept":
            assert sent is original
        else:
            assert type(sent) is type(original) and sent.id == original.id
            assert getattr(sent, "tool_call_id", None) == getattr(original, "tool_call_id", None)


@EXAMPLES
@given(conversations(), trimmers())
def test_the_budget_is_exact_and_input_that_fits_is_unchanged(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    outcome = trimmer.trim(messages)
    assert outcome.tokens_before == COUNTER.count_messages(messages)
    assert outcome.tokens_after == COUNTER.count_messages(outcome.messages)
    assert outcome.over_budget == (outcome.tokens_after > trimmer.options.budget)
    if outcome.tokens_before <= trimmer.options.budget:
        assert not outcome.changed
        assert all(a is b for a, b in zip(outcome.messages, messages, strict=True))


@EXAMPLES
@given(conversations(), trimmers())
def test_must_keep_messages_stay_and_tool_calls_stay_paired(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    outcome = trimmer.trim(messages)
    assert layout(messages, trimmer).must_keep <= kept(outcome)
    requested: set[str] = set()
    answered: set[str] = set()
    for message in outcome.messages:
        if isinstance(message, AIMessage):
            requested.update(call["id"] or "" for call in message.tool_calls)
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in requested
            answered.add(message.tool_call_id)
    assert requested == answered


@EXAMPLES
@given(conversations(), trimmers())
def test_over_budget_only_when_the_must_keep_messages_alone_do_not_fit(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    outcome = trimmer.trim(messages)
    if outcome.over_budget:
        rules = layout(messages, trimmer)
        if rules.must_keep:
            assert kept(outcome) == rules.must_keep
        else:  # a request needs a message: the block ranked highest (a unit, a round) is kept
            sent = kept(outcome)
            units = analysis(trimmer.token_counter, messages).units
            assert sent and len({u.round for u in units if sent & {*u.indices}}) == 1
        # A message whose text is too short to cut (an image with a line of text) is kept whole:
        # shortening it would only make it grow.
        shortenable = [
            d
            for d in outcome.decisions
            if d.index in rules.must_keep
            and d.role == "tool"
            and COUNTER.count_text(messages[d.index].text) > MIN_SHORTENED_TOKENS
        ]
        # Every tool result was shortened as far as it goes; the question is sent whole, since
        # shortening it could not make the request fit.
        assert all(d.action == "shortened" or d.tokens <= MIN_SHORTENED_TOKENS for d in shortenable)
        assert all(
            d.action != "shortened" for d in outcome.decisions if d.priority_class == "latest_user"
        )


@EXAMPLES
@given(conversations(), trimmers())
def test_lower_classes_and_older_tool_calls_are_dropped_first(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    outcome = trimmer.trim(messages)
    rules = layout(messages, trimmer)
    survivors = kept(outcome)
    # Newest first: the kept optional tool steps of the current turn are its newest ones.
    kept_steps = [survivors.issuperset(unit) for unit in rules.tool_units]
    assert kept_steps == sorted(kept_steps)
    # Strict priority: once a class loses a message to the budget, lower classes keep nothing
    # optional.
    losing = {d.priority_class for d in outcome.decisions if d.rule == "dropped_for_budget"}
    for rank, name in enumerate(trimmer.options.priority_order):
        if name in losing:
            lower = set(trimmer.options.priority_order[rank + 1 :])
            assert not [i for i in survivors - rules.must_keep if rules.classes[i] in lower], (
                name,
                lower,
            )


@EXAMPLES
@given(conversations(), trimmers())
def test_the_same_input_gives_the_same_output(
    messages: list[BaseMessage], trimmer: PriorityTrimmer
) -> None:
    first = trimmer.trim(messages)
    again = PriorityTrimmer._from_options(
        dataclasses.replace(trimmer.options, token_counter=TokenCounter(cache_size=64))
    ).trim([m.model_copy() for m in messages])
    assert [m.model_dump() for m in first.messages] == [m.model_dump() for m in again.messages]
    assert [d.rule for d in first.decisions] == [d.rule for d in again.decisions]
