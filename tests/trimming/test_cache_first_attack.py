"""An attack on the cache-first default from the user's side: the inputs users send, growing.

Every test grows conversations and trims them call after call through the public API
(``PriorityTrimmer.trim``, chains, ``TrimmingMiddleware`` in a real ``create_agent`` against the
simulator), and checks on every call what docs/trimming.md promises: the input is never
modified; the system prompt and the latest user message are sent (or the question shortened,
the rule saying so); no tool call is sent without its results nor a result without its call;
the request fits when the part no trim removes fits; recalled rounds sit right before the
current turn, after the rounds kept in place; while the cut stays put each request is the
previous one plus the new messages; and a fresh trimmer (a replica) sends the same as a reused
one. The tests after the last section mark reproduce the defects this attack found (each failed
before its fix).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.runnables import RunnableLambda
from support.conversations import assert_openai_order, call_ids, filler
from support.fakes import Recorder
from support.simulators import settings_of
from support.wire import sent_request

from agent_latency import build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import MARKER_TEXT, TOOL_DEFINITION
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
SYSTEM = "You are the operations assistant of a bookshop; answer from the conversation."
IMAGE = {
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64," + "iVBOR" * 300, "detail": "low"},
}
FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=8
)
UNSTABLE = {"recalled", "dropped_for_budget", "shortened_to_fit"}
"""Rules of a call that may change the prompt before its new messages without a cut moving."""


def trimmer(budget: int, **options: Any) -> PriorityTrimmer:
    return PriorityTrimmer(budget, token_counter=COUNTER, **options)


def ids_of(messages: Sequence[Any]) -> list[str]:
    return [m["id"] if isinstance(m, dict) else m.id for m in messages]


def signature(result: TrimResult) -> list[tuple[str, str | None, str]]:
    return [(type(m).__name__, m.id, json.dumps(m.content)) for m in result.messages]


def assert_pairs_whole(sent: Sequence[BaseMessage]) -> None:
    """Every result sent answers a call sent before it; every call sent has its results."""
    issued: set[str] = set()
    answered: set[str] = set()
    for message in sent:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in issued, f"a result without its call: {message.id}"
            answered.add(message.tool_call_id)
        issued.update(call_ids(message))
    assert issued == answered, f"calls sent without their results: {issued - answered}"


def assert_invariants(
    messages: Sequence[Any],
    result: TrimResult,
    previous: tuple[Sequence[Any], TrimResult] | None = None,
) -> None:
    """What every call must keep (the module docstring); ``previous`` is the call before, whose
    messages this call's begin with. Messages carry unique ids."""
    sent, decisions = result.messages, result.decisions
    index = {message_id: i for i, message_id in enumerate(ids_of(messages))}
    positions = [index[m.id] for m in sent]  # type: ignore[index]
    assert len(set(positions)) == len(positions), f"a message sent twice: {ids_of(sent)}"
    assert_pairs_whole(sent)
    assert_openai_order(sent)  # a far result ("far") right after its call
    systems = [d.index for d in decisions if d.priority_class == "system"]
    assert set(systems) <= set(positions), "a system message was dropped"
    assert result.over_budget == (result.tokens_after > result.effective_budget)
    latest = next((d for d in decisions if d.priority_class == "latest_user"), None)
    if latest is None:
        return
    assert latest.action == "kept" or latest.rule == "shortened_to_fit", latest
    inputs = convert_to_messages(messages)
    order = sent_order(inputs)
    fixed = COUNTER.count_messages([inputs[i] for i in [*systems, latest.index]])
    if latest.index == len(messages) - 1 and fixed <= result.effective_budget:
        assert not result.over_budget, "over budget though the system and question fit"
    # Before the question: the rounds kept in place in their order, then the recalled ones.
    at = positions.index(latest.index)
    before, after = positions[:at], positions[at:]
    recalled = [p for p in before if decisions[p].rule == "recalled"]
    in_place = [p for p in before if decisions[p].rule != "recalled"]
    assert before == in_place + recalled, "recalled rounds are not right before the question"
    assert in_place == sorted(in_place, key=order) and recalled == sorted(recalled, key=order)
    assert after == sorted(after, key=order)
    if previous is not None:
        assert_prefix_kept(previous, messages, result)


def sent_order(inputs: Sequence[BaseMessage]) -> Callable[[int], tuple[int, int]]:
    """What sorts input positions in the order they are sent (recall apart): a tool result by
    its call's position (a far one is sent right after its call), any other by its own."""
    call_at: dict[str, int] = {}
    anchor: dict[int, int] = {}
    for position, message in enumerate(inputs):
        if isinstance(message, ToolMessage) and message.tool_call_id in call_at:
            anchor[position] = call_at[message.tool_call_id]
        call_at.update(dict.fromkeys(call_ids(message), position))
    return lambda position: (anchor.get(position, position), position)


def settled(
    messages: Sequence[Any],
    result: TrimResult,
    previous: tuple[Sequence[Any], TrimResult] | None,
) -> tuple[Sequence[Any], TrimResult] | None:
    """The call the next one's prefix is checked against: this one, unless it recalled or
    dropped by priority (then the one before: the next call goes back to the appended rounds)."""
    return previous if {d.rule for d in result.decisions} & UNSTABLE else (messages, result)


def assert_prefix_kept(
    previous: tuple[Sequence[Any], TrimResult], messages: Sequence[Any], result: TrimResult
) -> None:
    """While no cut moves, the request is the previous one plus the new messages, byte for
    byte. ``previous`` is the last call that neither recalled nor dropped by priority (see
    :func:`settled`), so a call after a recall must be back on the appended rounds; nothing is
    checked across the first trim or a cut."""
    _, old = previous
    rules = {d.rule for d in (*old.decisions, *result.decisions)}
    # Before the first call that cuts anything, the first cut may change any message (a call
    # that cut nothing can still have changed the order: a far tool result goes after its call).
    if all(d.action == "kept" for d in old.decisions) or rules & UNSTABLE:
        return
    moved = any(
        (d.action == "dropped") != (result.decisions[d.index].action == "dropped")
        for d in old.decisions
    )
    if moved:
        return  # the cut moved
    assert signature(result)[: len(old.messages)] == signature(old), (
        f"the prompt changed before the new messages at {len(messages)} messages"
    )


# --- random growing conversations of every kind of input -------------------------------------

FIRSTS = ["system", "chat_system", "chat_developer", "dict_system", "dict_developer"]
KINDS = [
    *("user", "chat_user", "dict_user", "image", "ai", "empty", "cjk", "emoji", "ask", "ask"),
    *("tools", "parallel", "big_result", "invalid", "dict_tools", "far", "mid_system"),
]


def first_message(kind: str) -> Any:
    if kind == "system":
        return SystemMessage(SYSTEM, id="m0")
    if kind.startswith("chat_"):
        return ChatMessage(role=kind.removeprefix("chat_"), content=SYSTEM, id="m0")
    return {"role": kind.removeprefix("dict_"), "content": SYSTEM, "id": "m0"}


def growing(first: str, kinds: list[str]) -> Iterator[list[Any]]:
    """The calls of a conversation of ``kinds``, one list per call: at each user message, and
    after each tool step's results, as an agent calls the model. Ids are unique."""
    messages: list[Any] = [first_message(first)]
    serial = iter(range(1, 10_000))

    def new_id() -> str:
        return f"m{next(serial)}"

    for n, kind in enumerate(kinds):
        if kind == "ask":
            messages.append(HumanMessage(f"What was code-{n // 2}x about again?", id=new_id()))
        elif kind == "cjk":
            messages.append(HumanMessage(f"我们之前说的 code-{n // 3}x 是什么？", id=new_id()))
        elif kind == "emoji":
            messages.append(HumanMessage("🚀📦 " * 30 + f"ship code-{n}x 🙂", id=new_id()))
        elif kind == "chat_user":
            messages.append(ChatMessage(role="user", content=filler(n), id=new_id()))
        elif kind == "dict_user":
            messages.append({"role": "user", "content": filler(n), "id": new_id()})
        elif kind == "image":
            parts = [{"type": "text", "text": filler(n)}, IMAGE]
            messages.append(HumanMessage(parts, id=new_id()))  # type: ignore[arg-type]
        elif kind == "empty":
            messages.append(HumanMessage("", id=new_id()))
        elif kind == "user":
            messages.append(HumanMessage(filler(n), id=new_id()))
        elif kind == "mid_system":
            messages.append(SystemMessage(f"Policy {n}: be terse.", id=new_id()))
            continue
        elif kind == "ai":
            messages.append(AIMessage(filler(n, "answers"), id=new_id()))
            continue
        if kind in ("tools", "parallel", "big_result", "far"):
            count = 3 if kind == "parallel" else 1
            calls = [
                {"name": "search", "args": {"q": f"code-{n}x"}, "id": new_id()}
                for _ in range(count)
            ]
            messages.append(AIMessage("", tool_calls=calls, id=new_id()))
            if kind == "far":  # a ToolMessage some way from its call
                messages.append(AIMessage("Still searching...", id=new_id()))
            size = 400 if kind == "big_result" else 1 + n % 4
            messages += [
                ToolMessage(filler(n, "catalogue") * size, tool_call_id=c["id"], id=new_id())
                for c in calls
            ]
        elif kind == "dict_tools":
            call_id = new_id()
            function = {"name": "search", "arguments": json.dumps({"q": f"code-{n}x"})}
            call = {"id": call_id, "type": "function", "function": function}
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call], "id": new_id()}
            )
            result = {"role": "tool", "tool_call_id": call_id, "content": filler(n, "catalogue")}
            messages.append({**result, "id": new_id()})
        elif kind == "invalid":
            bad = {"name": "search", "args": "{not json", "id": new_id(), "error": "bad JSON"}
            messages.append(AIMessage("", invalid_tool_calls=[bad], id=new_id()))  # type: ignore[list-item]
            messages.append(
                ToolMessage("Error: bad arguments.", tool_call_id=bad["id"], id=new_id())
            )
        yield list(messages)
        messages.append(AIMessage(f"Done {n}.", id=new_id()))


@settings(max_examples=120, deadline=None)
@given(
    first=st.sampled_from(FIRSTS),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=30),
    budget=st.integers(120, 3000),
)
def test_random_growing_conversations_keep_every_invariant_on_every_call(
    first: str, kinds: list[str], budget: int
) -> None:
    reused = trimmer(budget)
    previous: tuple[list[Any], TrimResult] | None = None
    for messages in growing(first, kinds):
        snapshot = copy.deepcopy(messages)
        result = reused.trim(messages)
        assert_invariants(messages, result, previous)
        assert signature(trimmer(budget).trim(messages)) == signature(result)  # a replica
        assert messages == snapshot  # never modified
        previous = settled(messages, result, previous)


def test_a_long_mixed_conversation_keeps_every_invariant_at_every_budget() -> None:
    # One fixed conversation with every kind of input, long enough for several cuts.
    kinds = (KINDS * 4)[:60]
    for budget in (150, 600, 1500, 4000):
        reused = trimmer(budget)
        previous = None
        calls = 0
        for messages in growing("chat_system", kinds):
            result = reused.trim(messages)
            assert_invariants(messages, result, previous)
            previous = settled(messages, result, previous)
            calls += 1
        assert calls > 50 and result.dropped_messages > 0


# --- replicas, many conversations, batches -----------------------------------------------------

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches the catalogue.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


def test_replicas_put_byte_identical_requests_on_the_wire() -> None:
    # Replica A sees every call of the conversation, B only every third, C every call but
    # between them 20 other conversations (more than the 16 a trimmer remembers), D none.
    calls = list(growing("system", (KINDS * 2)[:36]))
    a, b, c = (trimmer(900, tools=[SEARCH_TOOL]) for _ in range(3))
    others = [list(growing("system", ["user", "ask", "tools"] * 4))[-1] for _ in range(20)]
    for n, messages in enumerate(calls):
        for other in others:
            c.trim(other[: 2 + n])
        replicas = [a, c, trimmer(900, tools=[SEARCH_TOOL]), *([b] if n % 3 == 0 else [])]
        bodies = {
            json.dumps(sent_request(t.trim(messages).messages, [SEARCH_TOOL]), sort_keys=True)
            for t in replicas
        }
        assert len(bodies) == 1, f"replicas differ at call {n}"


def conversations(count: int) -> list[list[list[Any]]]:
    topics = ["user", "ask", "tools", "cjk", "parallel", "image", "emoji", "big_result"]
    return [
        list(growing("system", [topics[(k + i) % len(topics)] for i in range(14)]))
        for k in range(count)
    ]


def test_more_conversations_than_remembered_through_batch_and_abatch_match_fresh_trims() -> None:
    budget = 700
    chain = trimmer(budget) | RunnableLambda(lambda messages: messages)
    streams = conversations(20)
    for step in range(max(map(len, streams))):
        inputs = [calls[min(step, len(calls) - 1)] for calls in streams]
        threaded = chain.batch(inputs, config={"max_concurrency": 8})
        gathered = asyncio.run(chain.abatch(inputs))
        for messages, got, also in zip(inputs, threaded, gathered, strict=True):
            expected = [(m.id, m.content) for m in trimmer(budget).trim(messages).messages]
            assert [(m.id, m.content) for m in got] == expected
            assert [(m.id, m.content) for m in also] == expected


# --- in-place edits between calls -------------------------------------------------------------


def edit_content(messages: list[Any]) -> None:
    target = next(m for m in messages[3:] if isinstance(m, HumanMessage))
    target.content = "EDITED: the delivery van is blue. " + str(target.content)


def remove_from_middle(messages: list[Any]) -> None:
    middle = len(messages) // 2
    at = next(i for i in range(middle, len(messages)) if isinstance(messages[i], HumanMessage))
    del messages[at : at + 2]  # a user message and the answer after it


def reorder(messages: list[Any]) -> None:
    users = [i for i, m in enumerate(messages[:-1]) if isinstance(m, HumanMessage)]
    a, b = users[2], users[len(users) // 2]
    messages[a], messages[b] = messages[b], messages[a]


def edit_tool_call_args(messages: list[Any]) -> None:
    call = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
    call.tool_calls[0]["args"]["q"] = "a much longer query about the blue delivery van " * 5


def replace_image(messages: list[Any]) -> None:
    pictured = next(m for m in messages if isinstance(m.content, list))
    pictured.content[1] = {"type": "image_url", "image_url": {"url": "https://x.test/van.png"}}


@pytest.mark.parametrize(
    "edit", [edit_content, remove_from_middle, reorder, edit_tool_call_args, replace_image]
)
@pytest.mark.parametrize("budget", [500, 1500])
def test_in_place_edits_between_calls_are_trimmed_as_a_fresh_trimmer_trims(
    edit: Callable[[list[Any]], None], budget: int
) -> None:
    kinds = ["image", "user", "tools", "ask", "user", "cjk", "parallel", "user"] * 4
    calls = [m for m in growing("system", kinds) if isinstance(m[-1], HumanMessage)]
    reused = trimmer(budget)
    for messages in calls[:-1]:
        reused.trim(messages)
    last = calls[-1]
    edit(last)
    result = reused.trim(last)
    assert_invariants(last, result)
    assert signature(result) == signature(trimmer(budget).trim(last))
    follow = [*last, AIMessage("ok", id="after-1"), HumanMessage("And the van?", id="after-2")]
    assert signature(reused.trim(follow)) == signature(trimmer(budget).trim(follow))


EDITS = [edit_content, remove_from_middle, reorder, edit_tool_call_args, replace_image]


@settings(max_examples=25, deadline=None)
@given(
    edits=st.lists(st.sampled_from([None, None, None, *EDITS]), min_size=30, max_size=30),
    budget=st.integers(300, 2500),
)
def test_random_edits_between_growing_calls_are_trimmed_as_a_fresh_trimmer_trims(
    edits: list[Callable[[list[Any]], None] | None], budget: int
) -> None:
    kinds = ["image", "user", "tools", "ask", "user", "cjk", "parallel", "emoji"] * 4
    calls = [m for m in growing("system", kinds) if isinstance(m[-1], HumanMessage)]
    reused = trimmer(budget)
    for messages, edit in zip(calls[4:], edits, strict=False):
        if edit is not None:
            # The later calls share the message objects (they keep a content edit) but not
            # this list (a removal or a reordering is undone on the next call).
            edit(messages)
        result = reused.trim(messages)
        assert_invariants(messages, result)
        assert signature(result) == signature(trimmer(budget).trim(messages))


# --- budgets ----------------------------------------------------------------------------------


def test_budgets_tiny_exact_one_below_and_huge() -> None:
    for messages in list(growing("system", ["user", "ask", "tools", "cjk", "user"] * 3))[3::3]:
        question = next(
            i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)
        )
        if question != len(messages) - 1:
            continue
        # Room for the system prompt alone: the question is sent whole, over budget.
        tiny = trimmer(COUNTER.count_messages([messages[0]])).trim(messages)
        assert tiny.over_budget and ids_of(tiny.messages) == ["m0", messages[question].id]
        assert tiny.decisions[question].action == "kept"
        whole = COUNTER.count_messages(messages)
        exact = trimmer(whole).trim(messages)
        assert not exact.changed and exact.messages == messages
        below = trimmer(whole - 1).trim(messages)
        assert below.changed and below.tokens_after <= whole - 1 and not below.over_budget
        assert_invariants(messages, below)
        assert not trimmer(10**7).trim(messages).changed


def test_tool_results_bigger_than_the_budget_are_shortened_with_their_calls_kept() -> None:
    reused = trimmer(600)
    previous = None
    for messages in growing("system", ["big_result", "user", "parallel", "big_result"] * 4):
        result = reused.trim(messages)
        assert_invariants(messages, result, previous)
        assert_openai_order(result.messages)
        assert result.tokens_after <= 600 and not result.over_budget
        previous = settled(messages, result, previous)


# --- a real agent and a real chain against the simulator -------------------------------------


def test_a_real_agent_on_the_simulator_sends_valid_requests_within_budget_call_after_call() -> None:
    budget = 600
    recorder = Recorder()
    turns = [
        "The database port is 5432 on host db-7.",
        "我们的服务器在上海机房，编号是 SH-42。",
        "Deploy freeze starts Friday 🚀🚀🚀",
        "",
        "Pasted log: " + "GET /books 200 12ms " * 60,
        "服务器编号是什么？",
        "Which port does the database use?",
    ] * 2
    with running_simulator(FAST) as sim:
        trimmer_ = PriorityTrimmer.from_settings(settings_of(sim), budget=budget)
        agent = create_agent(
            build_chat_model(settings_of(sim)),
            tools=[],
            system_prompt=SYSTEM,
            middleware=[TrimmingMiddleware(trimmer_)],
        )
        state: dict[str, Any] = {"messages": []}
        for n, text in enumerate(turns):
            question = HumanMessage(text, id=f"q{n}")
            start = len(recorder.prompts)
            state = agent.invoke(
                {"messages": [*state["messages"], question]}, {"callbacks": [recorder]}
            )
            assert isinstance(state["messages"][-1], AIMessage)  # the simulator took every call
            for prompt in recorder.prompts[start:]:  # this turn's calls: a recall, an answer
                assert any(m.id == question.id for m in prompt)
    assert len(recorder.prompts) >= 2 * len(turns)
    assert len(recorder.server_tokens) == len(recorder.prompts)
    assert all(tokens <= budget for tokens in recorder.server_tokens), recorder.server_tokens
    for prompt in recorder.prompts:
        assert prompt[0].content == SYSTEM
        assert [i for i, m in enumerate(prompt) if m.content == MARKER_TEXT] in ([], [1])
        assert_openai_order(prompt)
    assert recorder.prompts[-1][1].content == MARKER_TEXT  # the conversation was cut


def test_a_chain_on_the_simulator_through_abatch_and_astream_events() -> None:
    budget = 500
    streams = conversations(18)

    async def run(chain: Any) -> list[str]:
        for step in range(8):
            inputs = [calls[min(step, len(calls) - 1)] for calls in streams]
            answers = await chain.abatch(inputs)
            assert all(a.usage_metadata["input_tokens"] <= budget for a in answers)
        events = [e async for e in chain.astream_events(streams[0][-1], version="v2")]
        return [e["name"] for e in events if e["event"] == "on_custom_event"]

    with running_simulator(FAST) as sim:
        chain = PriorityTrimmer.from_settings(settings_of(sim), budget=budget) | build_chat_model(
            settings_of(sim)
        )
        assert asyncio.run(run(chain)) == ["agent_latency.trim"]


# --- the defects found, each failing before its fix --------------------------------------------


def test_a_tool_result_arriving_after_the_next_question_is_sent_once() -> None:
    messages = [
        SystemMessage("You are an ops assistant.", id="sys"),
        HumanMessage("Look up the database port.", id="u0"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c0"}], id="a0"),
        HumanMessage(filler(1), id="u1"),
        AIMessage("Done 1.", id="d1"),
        HumanMessage("What is the database port?", id="q"),
        ToolMessage("The database port is 5432.", tool_call_id="c0", id="t0"),  # arrives late
    ]
    result = trimmer(120).trim(messages)
    assert ids_of(result.messages).count("t0") == 1, ids_of(result.messages)  # t0 sent twice


def todo_list(size: int) -> SystemMessage:
    return SystemMessage("Open tasks: " + "check the shelves; " * size, id="todo")


@pytest.mark.parametrize(
    "calls",
    [
        pytest.param("constant_todo", id="constant-size per-call system message"),
        pytest.param(
            "varying_todo",
            id="varying-size per-call system message",
        ),
        pytest.param(
            "reminders",
            id="system reminders kept in the history",
        ),
    ],
)
def test_the_cut_never_moves_back_to_rounds_it_left_out(calls: str) -> None:
    # A round dropped at the cut comes back only recalled (right before the question), never
    # in its place: the cut only moves forward, by whole epochs, while the history grows.
    reused = trimmer(2000)
    history: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    previous: tuple[list[BaseMessage], TrimResult] | None = None
    came_back = []
    for r in range(40):
        if calls == "reminders":
            history.append(SystemMessage(f"Reminder {r}: be concise.", id=f"s{r}"))
        question = HumanMessage(filler(r), id=f"u{r}")
        if calls == "reminders":
            messages = [*history, question]
        else:
            size = 20 if calls == "constant_todo" else (40 if r % 2 else 1)
            messages = [*history, todo_list(size), question]
        result = reused.trim(messages)
        if previous is not None:
            old_messages, old = previous
            left_out = {
                m.id
                for m, d in zip(old_messages, old.decisions, strict=True)
                if d.rule == "dropped_at_cut"
            }
            came_back += [
                (r, m.id)
                for m, d in zip(messages, result.decisions, strict=True)
                if m.id in left_out and d.rule == "within_budget"
            ]
        previous = (messages, result)
        history += [question, AIMessage(f"Done {r}.", id=f"d{r}")]
    assert result.dropped_messages > 0
    assert came_back == []


@pytest.mark.parametrize(
    "system",
    [
        pytest.param(SystemMessage(SYSTEM), id="SystemMessage"),
        pytest.param(
            ChatMessage(role="system", content=SYSTEM),
            id="ChatMessage-system",
        ),
        pytest.param(
            ChatMessage(role="developer", content=SYSTEM),
            id="ChatMessage-developer",
        ),
    ],
)
def test_the_elision_marker_goes_right_after_the_system_prompt(system: BaseMessage) -> None:
    hook = trimmer(600).as_pre_model_hook()
    history: list[BaseMessage] = [system]
    for r in range(30):
        history += [HumanMessage(filler(r)), AIMessage(f"Done {r}.")]
    sent = hook({"messages": [*history, HumanMessage("And now?")]})["llm_input_messages"]
    assert sent[0] is system
    assert "were left out" in str(sent[1].content)  # the marker


def test_tool_call_args_swapped_in_place_are_trimmed_as_a_fresh_trimmer_trims() -> None:
    messages: list[BaseMessage] = [SystemMessage("You are an ops assistant.", id="sys")]
    for r in range(7):
        args = {"q": "x" if r % 2 else "long " * 60}
        messages += [
            HumanMessage(f"Note {r} on the shelves: " + "restocked and dusted " * 6, id=f"u{r}"),
            AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": f"c{r}"}], id=f"a{r}"),
            ToolMessage(f"result {r}", tool_call_id=f"c{r}", id=f"t{r}"),
        ]
    messages.append(HumanMessage("And what about the shelves?", id="q"))
    reused = trimmer(675)
    reused.trim(messages)
    first, second = messages[2], messages[5]  # the calls of rounds 0 and 1
    assert isinstance(first, AIMessage) and isinstance(second, AIMessage)
    first.tool_calls[0]["args"], second.tool_calls[0]["args"] = (
        second.tool_calls[0]["args"],
        first.tool_calls[0]["args"],
    )
    assert ids_of(reused.trim(messages).messages) == ids_of(trimmer(675).trim(messages).messages)


ARABIC_FACT = "منفذ قاعدة البيانات هو 5432 على الخادم db-7"


@pytest.mark.parametrize(
    "mark",
    [
        pytest.param("?", id="ascii"),
        pytest.param("？", id="full-width"),
        pytest.param(
            "؟",
            id="arabic",
        ),
    ],
)
def test_a_question_about_a_cut_fact_recalls_it_whatever_its_question_mark(mark: str) -> None:
    messages: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    for r in range(40):
        said = ARABIC_FACT if r == 5 else f"ملاحظة {r}: تم ترتيب الرفوف " + "وتنظيفها " * 12
        messages += [HumanMessage(said, id=f"u{r}"), AIMessage(f"تم {r}.", id=f"d{r}")]
    messages.append(HumanMessage("ما هو منفذ قاعدة البيانات" + mark, id="q"))
    result = trimmer(1500).trim(messages)
    assert_invariants(messages, result)
    assert result.decisions[11].action == "kept"  # the fact (u5): recalled, as with ?


def test_the_elision_marker_never_puts_a_request_that_fits_over_the_budget() -> None:
    # Also seen in a real create_agent run: budget 300, a search tool, the request sent with
    # the marker is 341 tokens, over_budget_cause adds up to 298 without naming the marker.
    system = SystemMessage(SYSTEM)
    history: list[BaseMessage] = []
    for r in range(10):
        history += [HumanMessage(filler(r)), AIMessage(f"Done {r}.")]
    question = HumanMessage("Which shelves were restocked last week, and by whom?")
    fixed = COUNTER.count_messages([system, question]) + COUNTER.count_tools([TOOL_DEFINITION])
    hook = trimmer(fixed).as_pre_model_hook(prompt=system)
    sent = hook({"messages": [*history, question]})["llm_input_messages"]
    assert sent[-1] is question
    request = COUNTER.count_messages([system, *sent]) + COUNTER.count_tools([TOOL_DEFINITION])
    assert request <= fixed  # the request without the marker fits exactly
