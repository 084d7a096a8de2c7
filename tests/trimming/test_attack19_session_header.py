"""Attacks on ``TrimmingMiddleware(session_header=...)`` from the user's side (helper attack19).

docs/trimming.md: "A value the model already sends in that header (`default_headers`,
`extra_headers`) is kept", and the model "is looked for through bindings (`bind`,
`with_retry`)". Defect fixed (its tests failed before): a ``ChatOpenAI`` wrapped with
``with_retry`` (as ``create_agent`` takes it) had its own session header replaced by the
middleware's key, on the wire (the real ``ChatOpenAI`` sends to the simulator, which records the
headers that arrive). Bare, bound with ``bind`` or with ``with_fallbacks``, it is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from agent_latency import LLMSettings, Settings, build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware

FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=4
)
OWN = {"X-Session-Id": "mine"}


def headers_sent(wrap: Callable[[Any], Any], model_options: dict[str, Any]) -> list[dict[str, str]]:
    with running_simulator(FAST) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
        model = wrap(build_chat_model(settings, **model_options))
        middleware = TrimmingMiddleware(
            PriorityTrimmer(2000), recall=False, session_header="x-session-id"
        )
        agent = create_agent(model, [], system_prompt="Be brief.", middleware=[middleware])
        agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})
        return list(sim.request_headers)


OPTIONS = pytest.mark.parametrize(
    "model_options",
    [{"default_headers": OWN}, {"model_kwargs": {"extra_headers": OWN}}],
    ids=["default_headers", "extra_headers"],
)


@OPTIONS
def test_a_bound_models_own_session_header_is_kept(model_options: dict[str, Any]) -> None:
    (headers,) = headers_sent(lambda model: model.bind(temperature=0), model_options)
    assert headers.get("x-session-id") == "mine"


# Failed before the headers were read from the chat model the binding wraps.
@OPTIONS
def test_a_with_retry_models_own_session_header_is_kept(model_options: dict[str, Any]) -> None:
    (headers,) = headers_sent(lambda model: model.with_retry(stop_after_attempt=1), model_options)
    assert headers.get("x-session-id") == "mine", headers.get("x-session-id")


def test_a_header_a_binding_sends_is_kept_with_the_bindings_other_headers() -> None:
    # The model settings' extra_headers replace a binding's when sent: both go in them.
    own = {**OWN, "X-Team": "blue"}
    (headers,) = headers_sent(lambda model: model.bind(extra_headers=own).with_retry(), {})
    assert (headers.get("x-session-id"), headers.get("x-team")) == ("mine", "blue")


def test_a_binding_without_the_header_keeps_its_others_beside_the_key() -> None:
    (headers,) = headers_sent(lambda model: model.bind(extra_headers={"X-Team": "blue"}), {})
    assert headers.get("x-team") == "blue"
    assert headers.get("x-session-id", "").startswith("agent-latency-")
