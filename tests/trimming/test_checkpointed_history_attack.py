"""Attacks on a checkpointed agent's history read back as new objects, from the user's side.

The analysis of a conversation is also remembered by value (``_rounds.AnalysisMemo``) and
shortened texts by their type, ids and text (``_shortening.MessageShortener``): a trim of
copies read back must decide exactly as a fresh trimmer does. Each defect found has a test that
failed on 7ed3e51; the others pin what held.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from support.conversations import GrowingConversation, figures, read_back
from support.simulators import QUICK

from agent_latency import LLMSettings, Settings, build_chat_model
from agent_latency.sim import RunningSimulator, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware, TrimResult, recall_tool
from agent_latency.trimming._request import RequestExtras


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


def _trimmed_alike(seen: list[BaseMessage], then: list[BaseMessage]) -> None:
    """A trimmer that trimmed ``seen`` trims ``then`` as a fresh trimmer does."""
    warm = PriorityTrimmer(3000, token_counter=TokenCounter())
    warm.trim(seen)

    trimmed = warm.trim(then)

    fresh = PriorityTrimmer(3000, token_counter=TokenCounter()).trim(then)
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


# --- The real thing: agents with a checkpointer, over HTTP to the simulator --------------------


class FreshlyChecked(PriorityTrimmer):
    """A trimmer that trims every request a fresh trimmer of its options trims too, and notes
    where the two differ (an agent's middleware logs a failed trim and sends untrimmed)."""

    differences: list[str]
    changed: list[bool]  # per trim, whether it left anything out or shortened it

    def _trim(self, value: object, request: RequestExtras) -> TrimResult:
        result = super()._trim(value, request)
        options = dataclasses.replace(self.options, token_counter=TokenCounter())
        fresh = PriorityTrimmer._from_options(
            options, cut_budget=None if self._warns else self._cut_budget
        )
        inputs = list(value) if isinstance(value, list) else []
        ours, theirs = figures(result, inputs), figures(fresh._trim(value, request), inputs)
        if ours != theirs:
            FreshlyChecked.differences.append(f"{ours} != {theirs}")
        FreshlyChecked.changed.append(result.changed)
        return result


@pytest.fixture
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(QUICK) as running:
        yield running


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
    settings = Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
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

    settings = Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
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


def test_threads_trimming_copies_of_the_same_and_other_conversations_trim_as_fresh_trimmers() -> (
    None
):
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
