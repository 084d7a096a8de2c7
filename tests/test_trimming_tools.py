"""Tool definitions as a trimmable class (issue 11 item 5): opt-in ``tool_budget``."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_latency._tokens import TokenCounter
from agent_latency.semconv import TRIM_DROPPED_TOOLS
from agent_latency.trimming import PriorityTrimmer

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
