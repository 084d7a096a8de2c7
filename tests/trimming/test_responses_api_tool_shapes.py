"""Function tools in the Responses API's flat shape (``{"type": "function", "name": ...,
"description": ..., "parameters": ...}``, no ``function`` object), as ``ChatOpenAI(
use_responses_api=True).bind_tools`` takes and sends them: a tool budget knows each by its name.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from agent_latency.trimming import PriorityTrimmer


def flat(name: str, description: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


TOOLS = [
    *(flat(f"ledger_{i}", f"Posts entry {i} of the shop's ledger. " * 3) for i in range(6)),
    flat("get_weather", "Gets the weather forecast of a city."),
]


def bound_tools() -> list[Any]:
    model = ChatOpenAI(model="gpt-4.1", api_key="sk-test", use_responses_api=True)  # type: ignore[arg-type]
    tools: list[Any] = model.bind_tools(TOOLS).kwargs["tools"]  # type: ignore[attr-defined]
    assert tools == TOOLS  # ChatOpenAI sends them as given
    return tools


def test_a_pinned_flat_function_tool_is_kept_and_the_dropped_are_named() -> None:
    # Before: every flat tool was named "function": the pin matched none of them, get_weather
    # was dropped, and dropped_tools said "function" six times.
    trimmer = PriorityTrimmer(4000, tool_budget=60, pinned_tools=["get_weather"])

    result = trimmer.trim([HumanMessage("Any news?")], tools=bound_tools())

    assert [tool["name"] for tool in result.tools or ()][-1] == "get_weather"
    assert set(result.dropped_tools) <= {f"ledger_{i}" for i in range(6)}
    assert result.dropped_tools


def test_a_flat_function_tool_called_in_this_turn_and_the_one_asked_for_are_kept() -> None:
    question = HumanMessage("What will the weather be in Paris tomorrow?")
    call = AIMessage("", tool_calls=[{"name": "ledger_3", "args": {}, "id": "c1"}])
    messages = [question, call, ToolMessage("posted", tool_call_id="c1")]
    trimmer = PriorityTrimmer(4000, tool_budget=130)

    result = trimmer.trim(messages, tools=bound_tools())

    # The tool whose result is in the prompt, and the one the question needs by its words.
    assert {"ledger_3", "get_weather"} <= {tool["name"] for tool in result.tools or ()}
