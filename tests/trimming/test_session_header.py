"""A per-conversation session header for routers that hash one (issue 27).

The real ``ChatOpenAI`` sends to the simulator, which records the headers that arrive.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage

from agent_latency import LLMSettings, Settings, build_chat_model
from agent_latency.sim import RunningSimulator, SimulatorConfig, running_simulator
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._cache_key import conversation_cache_key
from agent_latency.trimming._middleware import TrimmingMiddleware

SYSTEM = "Be brief."
FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=4
)
API_KEY = "sk-secret-value-1234"


def _agent(sim: RunningSimulator, **options: Any) -> Any:
    settings = Settings(
        llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0], api_key=API_KEY)
    )
    model = build_chat_model(settings, **options.pop("model_options", {}))
    middleware = TrimmingMiddleware(PriorityTrimmer(2000), recall=False, **options)
    return create_agent(model, [], system_prompt=SYSTEM, middleware=[middleware])


def _ask(agent: Any, *questions: str) -> None:
    messages: list[Any] = []
    for question in questions:
        messages = agent.invoke({"messages": [*messages, HumanMessage(question)]})["messages"]


def test_every_call_of_a_conversation_carries_one_session_value_and_another_one_another() -> None:
    with running_simulator(dataclasses.replace(FAST, api_key=API_KEY)) as sim:
        agent = _agent(sim, session_header="x-session-id")
        _ask(agent, "Plan my trip to Porto.", "And the hotel?")
        _ask(agent, "Something else entirely.")
        # A second replica serving the first conversation: no state shared.
        _ask(_agent(sim, session_header="x-session-id"), "Plan my trip to Porto.")
        headers = sim.request_headers

    values = [h.get("x-session-id") for h in headers]
    assert len(values) == 4
    assert values[0] is not None and values[0] == values[1] == values[3]
    assert values[2] is not None and values[2] != values[0]
    assert values[0] == conversation_cache_key(
        [SystemMessage(SYSTEM), HumanMessage("Plan my trip to Porto.")]
    )
    # A digest: no text of the conversation, and no credential, in it or in what is kept.
    assert "Porto" not in values[0] and API_KEY not in str(headers)
    # Not an OpenAI server: no prompt_cache_key unless asked; the header is the only hint.
    assert all(h.get("content-type") == "application/json" for h in headers)


def test_without_the_option_no_session_header_is_sent() -> None:
    with running_simulator(FAST) as sim:
        _ask(_agent(sim), "Plan my trip to Porto.")
        (headers,) = sim.request_headers
    assert not any("session" in name for name in headers)


def test_a_session_header_the_model_gives_is_kept_and_its_other_headers_still_go() -> None:
    given = {"X-Session-Id": "mine", "x-tenant": "blue"}
    with running_simulator(FAST) as sim:
        for options in ({"default_headers": given}, {"model_kwargs": {"extra_headers": given}}):
            for header in ("x-session-id", "x-route"):
                agent = _agent(sim, session_header=header, model_options=options)
                _ask(agent, "Plan my trip to Porto.")
        headers = sim.request_headers
    assert len(headers) == 4
    assert all(h["x-session-id"] == "mine" and h["x-tenant"] == "blue" for h in headers)
    assert [h.get("x-route", "").startswith("agent-latency-") for h in headers] == [
        False,
        True,
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "must be an HTTP header name"),
        ("x session", "must be an HTTP header name"),
        ("x-session\r\nx-evil", "must be an HTTP header name"),
        (3, "must be an HTTP header name"),
        ("Authorization", "the client sets itself"),
        ("content-type", "the client sets itself"),
    ],
)
def test_a_bad_session_header_is_refused_up_front_naming_it(name: object, says: str) -> None:
    with pytest.raises(ValueError, match=says) as error:
        TrimmingMiddleware(PriorityTrimmer(2000), session_header=name)  # type: ignore[arg-type]
    assert str(error.value).startswith("TrimmingMiddleware: session_header")
