"""Tool definitions as a trimmable class: opt-in ``tool_budget``."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_latency.semconv import TRIM_DROPPED_TOOLS
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
SUBJECTS = ["invoices", "shipments", "refunds", "warehouses", "suppliers", "payroll", "tickets"]


def tool(subject: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"search_{subject}",
            "description": f"Searches the {subject} records by date, customer and status. " * 6,
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }


WIRE_TOOLS = [tool(subject) for subject in SUBJECTS]


def conversation(question: str) -> list[BaseMessage]:
    call = AIMessage("", tool_calls=[{"name": "search_payroll", "args": {}, "id": "c1"}])
    return [
        HumanMessage("How many people are on payroll?"),
        call,
        ToolMessage("42", tool_call_id="c1"),
        AIMessage("42 people."),
        HumanMessage(question),
    ]


def test_a_tool_budget_keeps_called_pinned_then_relevant_tools(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    one = COUNTER.count_tools([WIRE_TOOLS[0]])
    trimmer = PriorityTrimmer(
        4000,
        token_counter=COUNTER,
        tools=WIRE_TOOLS,
        tool_budget=3 * one + one // 2,
        pinned_tools=["search_tickets"],
        tracer_provider=tracer_provider,
    )
    messages = conversation("Which refunds were issued last week?")
    result = trimmer.trim(messages)
    names = [t["function"]["name"] for t in result.tools or ()]
    # Called (payroll), pinned (tickets), then the one the question is about (refunds); in the
    # order they were given, so the definitions stay a stable prefix.
    assert names == ["search_refunds", "search_payroll", "search_tickets"]
    assert set(result.dropped_tools) == {f"search_{s}" for s in SUBJECTS} - set(names)
    assert result.tool_tokens == COUNTER.count_tools(result.tools or ()) < 4 * one
    (span,) = span_exporter.get_finished_spans()
    assert list((span.attributes or {})[TRIM_DROPPED_TOOLS]) == list(result.dropped_tools)
    # The same turn, one step further: the same tools, in the same order.
    step = [
        *messages,
        AIMessage("", tool_calls=[{"name": "search_refunds", "args": {}, "id": "c2"}]),
        ToolMessage("3 refunds", tool_call_id="c2"),
    ]
    assert trimmer.trim(step).tools == result.tools


def test_without_a_tool_budget_every_tool_is_sent_and_none_is_reported() -> None:
    result = PriorityTrimmer(4000, token_counter=COUNTER, tools=WIRE_TOOLS).trim(
        conversation("Which refunds were issued last week?")
    )
    assert result.tools is None and result.dropped_tools == ()
    assert result.tool_tokens == COUNTER.count_tools(WIRE_TOOLS)


# -- the forty-tool catalogue: stickiness, priority, purity ---------------------------------------

CATALOGUE = [
    {"type": "function", "function": spec}
    for spec in json.loads(
        (Path(__file__).parents[2] / "scripts" / "scenarios" / "forty_tools.json").read_text(
            encoding="utf-8"
        )
    )
]
NAMES = [t["function"]["name"] for t in CATALOGUE]
TOOL_BUDGET = 1_200  # about 8 of the 40


def turn(question: str, *called: str, step: int = 0) -> list[BaseMessage]:
    """A user turn: the question, the model's calls and their results, then an answer."""
    messages: list[BaseMessage] = [HumanMessage(question)]
    for k, name in enumerate(called):
        call_id = f"{name}-{step}-{k}"
        messages += [
            AIMessage("", tool_calls=[{"name": name, "args": {}, "id": call_id}]),
            ToolMessage("ok", tool_call_id=call_id),
        ]
    return [*messages, AIMessage("Done.")]


def kept_names(result: TrimResult) -> list[str]:
    return [t["function"]["name"] for t in result.tools or ()]


def forty(**options: Any) -> PriorityTrimmer:
    return PriorityTrimmer(
        50_000, token_counter=COUNTER, tools=CATALOGUE, tool_budget=TOOL_BUDGET, **options
    )


def test_tools_called_in_earlier_turns_do_not_push_out_the_tool_the_new_question_needs() -> None:
    history: list[BaseMessage] = []
    earlier = [name for name in NAMES if name != "escalate_incident"][:8]
    for i, name in enumerate(earlier):
        history += turn(f"question {i}", name, step=i)
    question = HumanMessage(
        "Page the on-call engineers, this looks like a sev2 incident in checkout."
    )

    result = forty().trim([*history, question])

    names = kept_names(result)
    assert "escalate_incident" in names
    assert result.tool_tokens <= TOOL_BUDGET
    # The rest of the budget goes to the tools called most recently, while they fit.
    assert set(earlier[-3:]) <= set(names) and not set(earlier) <= set(names)


def test_a_question_the_kept_tools_serve_keeps_them_and_a_new_subject_changes_them() -> None:
    trimmer = forty()
    weather = turn("Will it rain in Lisbon on Saturday? Check the weather.", "get_weather_forecast")
    first = trimmer.trim(weather[:1])
    assert "get_weather_forecast" in kept_names(first)

    for follow_up in ("And on Sunday? If the forecast says rain, we move indoors.", "Thanks!"):
        again = trimmer.trim([*weather, HumanMessage(follow_up)])
        assert again.tools == first.tools, follow_up

    new_subject = HumanMessage("Card charge ch_5521 went through twice; refund the duplicate.")
    changed = trimmer.trim([*weather, new_subject])
    assert "refund_payment" not in kept_names(first)
    assert {"refund_payment", "get_weather_forecast"} <= set(kept_names(changed))


def test_the_choice_is_a_pure_function_of_the_messages() -> None:
    conversation = [
        *turn("Where is parcel CT-44821-PT? Track it.", "track_shipment"),
        *turn("What inventory does each warehouse hold?", "check_inventory_stock", step=1),
        *turn("Thanks, and the same for saucers?", "check_inventory_stock", step=2),
        *turn("Show me the latest container logs of worker-7.", "tail_container_logs", step=3),
        HumanMessage("Roll the checkout service back to its previous release."),
    ]
    prefixes = [conversation[:n] for n in range(1, len(conversation) + 1)]
    incremental = forty()
    step_by_step = [incremental.trim(p).tools for p in prefixes]

    # A fresh trimmer replays each prefix from scratch; the first one, asked again in any order.
    assert [forty().trim(p).tools for p in prefixes] == step_by_step
    assert [incremental.trim(p).tools for p in reversed(prefixes)] == step_by_step[::-1]
    for tools in step_by_step:  # always a subsequence of the catalogue: its order
        names = [t["function"]["name"] for t in tools or ()]
        assert names == sorted(names, key=NAMES.index)
    # The tool list changed only at a new subject's question, never inside a turn.
    changes = [n for n in range(1, len(prefixes)) if step_by_step[n] != step_by_step[n - 1]]
    assert all(isinstance(prefixes[n][-1], HumanMessage) for n in changes)


def test_tools_called_in_the_current_turn_and_pinned_tools_are_always_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    biggest = max(NAMES, key=lambda n: COUNTER.count_tools([CATALOGUE[NAMES.index(n)]]))
    # A call to a tool the choice did not send (e.g. a tool list the model saw before).
    messages = [
        HumanMessage("Will it rain in Lisbon on Saturday? Check the weather."),
        AIMessage("", tool_calls=[{"name": "approve_expense", "args": {}, "id": "c1"}]),
        ToolMessage("approved", tool_call_id="c1"),
    ]
    trimmer = PriorityTrimmer(
        50_000, token_counter=COUNTER, tools=CATALOGUE, tool_budget=100, pinned_tools=[biggest]
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency.trimming._tools"):
        result = trimmer.trim(messages)
    assert set(kept_names(result)) == {biggest, "approve_expense"}
    assert result.tool_tokens > 100
    (record,) = caplog.records
    assert "approve_expense" in record.getMessage() and biggest in record.getMessage()


@pytest.mark.parametrize("seed", range(12))
def test_random_conversations_keep_within_the_tool_budget_unless_forced(seed: int) -> None:
    rng = random.Random(seed)
    words = [w for t in CATALOGUE for w in t["function"]["description"].split()]
    budget = rng.choice([150, 400, 800, 1_200, 2_500])
    pinned = rng.sample(NAMES, rng.choice([0, 0, 1, 2]))
    trimmer = PriorityTrimmer(
        50_000, token_counter=COUNTER, tools=CATALOGUE, tool_budget=budget, pinned_tools=pinned
    )
    single = {
        name: COUNTER.count_tools([tool]) for name, tool in zip(NAMES, CATALOGUE, strict=True)
    }
    messages: list[BaseMessage] = []
    previous: tuple[object, ...] | None = None
    for step in range(rng.randint(3, 9)):
        messages.append(HumanMessage(" ".join(rng.sample(words, rng.randint(0, 8)))))
        current: set[str] = set()
        for k in range(rng.randint(0, 3)):
            result = trimmer.trim(messages)
            if k:  # within a turn the list does not change when the calls were sent
                assert result.tools == previous
            sent = kept_names(result)
            name = rng.choice(sent if sent and rng.random() < 0.9 else NAMES)
            current.add(name)
            messages += [
                AIMessage("", tool_calls=[{"name": name, "args": {}, "id": f"{step}-{k}"}]),
                ToolMessage("ok", tool_call_id=f"{step}-{k}"),
            ]
            result = trimmer.trim(messages)
            previous = result.tools
            names = set(kept_names(result))
            assert current | set(pinned) <= names
            forced = sum(single[n] for n in current | set(pinned))
            if forced <= budget:
                assert sum(single[n] for n in names) <= budget
                assert result.tool_tokens <= budget
        messages.append(AIMessage("Done."))


def test_a_tool_forced_over_the_budget_in_one_turn_does_not_stay_over_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = 150  # the weather tool's 109 tokens fit, the hotel tool's 218 do not
    trimmer = PriorityTrimmer(50_000, token_counter=COUNTER, tools=CATALOGUE, tool_budget=budget)
    # The model calls a tool that was not sent (it saw an older tool list): forced in, over it.
    first_turn = [
        HumanMessage("Will it rain in Lisbon on Saturday? Check the weather."),
        AIMessage("", tool_calls=[{"name": "book_hotel_room", "args": {}, "id": "c1"}]),
        ToolMessage("booked", tool_call_id="c1"),
    ]
    with caplog.at_level(logging.WARNING, logger="agent_latency.trimming._tools"):
        forced = trimmer.trim(first_turn)
    assert "book_hotel_room" in kept_names(forced) and forced.tool_tokens > budget
    assert "book_hotel_room" in caplog.records[-1].getMessage()
    caplog.clear()

    # The next question: nothing forces the tools over the budget any more.
    with caplog.at_level(logging.WARNING, logger="agent_latency.trimming._tools"):
        later = trimmer.trim([*first_turn, AIMessage("Booked."), HumanMessage("And on Sunday?")])

    assert later.tool_tokens <= budget
    assert not caplog.records


def test_tokens_before_count_every_tool_given_not_only_those_a_tool_budget_kept() -> None:
    one = COUNTER.count_tools([WIRE_TOOLS[0]])
    trimmer = PriorityTrimmer(4000, token_counter=COUNTER, tools=WIRE_TOOLS, tool_budget=2 * one)
    everything = PriorityTrimmer(4000, token_counter=COUNTER, tools=WIRE_TOOLS)
    messages = conversation("Any refunds today?")
    result = trimmer.trim(messages)
    assert result.dropped_tools
    assert result.tokens_before == everything.trim(messages).tokens_before
    assert result.tokens_before > result.tokens_after
