"""Which tools the simulator calls, parallel calls, and tool results that answer no call.

Driven by the real ``openai`` client and by ``create_agent`` over ``ChatOpenAI``.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from agent_latency.sim import DEFAULT_MODEL, RunningSimulator, SimulatorConfig, running_simulator

FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=5000, answer_tokens=8
)


def function(name: str, description: str = "", **properties: Any) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOLS = [
    function("get_time", "Tells the current time in a time zone.", zone={"type": "string"}),
    function("get_weather", "Looks up the forecast for a city.", city={"type": "string"}),
    function(
        "convertCurrency", "Converts an amount between currencies.", amount={"type": "number"}
    ),
]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(FAST) as running:
        yield running


def ask(sim: RunningSimulator, messages: list[dict[str, Any]], **request: Any) -> Any:
    client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0, timeout=10)
    return client.chat.completions.create(
        model=DEFAULT_MODEL, messages=messages, **{"tools": TOOLS, **request}
    )


def called(response: Any) -> list[str]:
    return [call.function.name for call in response.choices[0].message.tool_calls or ()]


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is the weather in Paris?", ["get_weather"]),  # a word of the name
        ("Call get_time please", ["get_time"]),  # the whole name
        ("How much is 20 USD in EUR? Use the currency tool.", ["convertCurrency"]),  # camelCase
        ("Will it rain tomorrow? Check the forecast.", ["get_weather"]),  # the description
        ("Hello there", ["get_time"]),  # nothing fits: the first in turn
    ],
)
def test_the_tool_that_fits_the_question_is_called(
    sim: RunningSimulator, question: str, expected: list[str]
) -> None:
    assert called(ask(sim, user(question))) == expected


def test_every_named_tool_is_called_in_parallel_unless_the_request_says_not_to(
    sim: RunningSimulator,
) -> None:
    question = user("What time is it in Tokyo, and what is the weather there?")

    parallel = ask(sim, question)
    single = ask(sim, question, parallel_tool_calls=False)

    assert called(parallel) == ["get_time", "get_weather"]  # in the order offered
    calls = parallel.choices[0].message.tool_calls
    assert len({call.id for call in calls}) == 2
    assert [json.loads(call.function.arguments) for call in calls] == [
        {"zone": "example"},
        {"city": "example"},
    ]
    assert parallel.usage.completion_tokens == sum(
        1 + -(-len(call.function.arguments) // 4) for call in calls
    )
    assert called(single) == ["get_time"]


def test_streamed_parallel_calls_assemble_into_the_blocking_ones(sim: RunningSimulator) -> None:
    model = ChatOpenAI(
        base_url=sim.base_url, api_key="unused", model=DEFAULT_MODEL, max_retries=0
    ).bind_tools(TOOLS)
    question = "What time is it in Tokyo, and what is the weather there?"

    blocking = model.invoke(question)
    merged = functools.reduce(operator.add, model.stream(question))

    assert isinstance(blocking, AIMessage)
    assert [call["name"] for call in blocking.tool_calls] == ["get_time", "get_weather"]
    assert merged.tool_calls == blocking.tool_calls  # type: ignore[attr-defined]


def test_required_tool_choice_goes_through_every_tool_in_turn(sim: RunningSimulator) -> None:
    messages = user("Go on.")
    names = []
    for _ in range(4):
        response = ask(sim, messages, tool_choice="required")
        (call,) = response.choices[0].message.tool_calls
        names.append(call.function.name)
        messages = [
            *messages,
            response.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "done"},
        ]

    assert names == ["get_time", "get_weather", "convertCurrency", "get_time"]


def test_after_a_tool_result_the_answer_is_text_unless_a_call_is_required(
    sim: RunningSimulator,
) -> None:
    question = user("What is the weather in Paris?")
    call = ask(sim, question).choices[0].message
    history = [
        *question,
        call.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "Sunny"},
    ]

    assert ask(sim, history).choices[0].message.content.startswith("The agent")
    assert called(ask(sim, history, tool_choice="required")) != []


def test_an_agent_runs_parallel_tools_then_answers() -> None:
    seen: list[str] = []

    @tool
    def get_time(zone: str) -> str:
        """Tells the current time in a time zone."""
        seen.append(f"time:{zone}")
        return "09:00"

    @tool
    def get_weather(city: str) -> str:
        """Looks up the forecast for a city."""
        seen.append(f"weather:{city}")
        return "Sunny"

    with running_simulator(FAST) as sim:
        model = ChatOpenAI(
            base_url=sim.base_url, api_key="unused", model=DEFAULT_MODEL, streaming=True
        )
        agent = create_agent(model, tools=[get_time, get_weather])
        result = agent.invoke({"messages": user("The time and the weather in Oslo?")})

    kinds = [type(message).__name__ for message in result["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "AIMessage"]
    assert sorted(seen) == ["time:example", "weather:example"]
    assert result["messages"][-1].text.startswith("The agent")


# --- tool results that answer no call ----------------------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (
            [*user("hi"), {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
            "messages[1].role",
        ),
        (
            [
                *user("hi"),
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_2", "content": "x"},
            ],
            "messages[2].tool_call_id",
        ),
        (
            [
                *user("hi"),
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "x"},
                {"role": "assistant", "content": "done"},
                {"role": "tool", "tool_call_id": "call_1", "content": "again"},
            ],
            "messages[4].role",
        ),
    ],
    ids=["no-call-before", "unknown-id", "after-a-text-answer"],
)
def test_a_tool_result_that_answers_no_call_gets_400(
    sim: RunningSimulator, messages: list[dict[str, Any]], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        ask(sim, messages)

    assert refused.value.body["param"] == param  # type: ignore[index]
    assert "tool" in refused.value.body["message"]  # type: ignore[index]


def test_results_of_parallel_calls_are_accepted(sim: RunningSimulator) -> None:
    second = {**CALL, "id": "call_2"}
    messages = [
        *user("hi"),
        {"role": "assistant", "content": None, "tool_calls": [CALL, second]},
        {"role": "tool", "tool_call_id": "call_2", "content": "b"},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
    ]

    assert ask(sim, messages).choices[0].finish_reason == "stop"


def test_a_phrase_the_user_quotes_is_the_string_argument(sim: RunningSimulator) -> None:
    quoted = ask(sim, user('What is the weather in "Porto Alegre"?'))
    plain = ask(sim, user("What is the weather in Porto Alegre?"))

    (call,) = quoted.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Porto Alegre"}
    assert json.loads(plain.choices[0].message.tool_calls[0].function.arguments) == {
        "city": "example"
    }
