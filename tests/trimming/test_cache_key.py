"""Each call of a conversation carries one prompt_cache_key where the server takes it."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import chat_models
from langchain_core.messages import HumanMessage, SystemMessage
from support.wire import recording_chat_openai

from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._middleware import TrimmingMiddleware


def _agent(base_url: str, bodies: list[dict[str, Any]], **options: Any) -> Any:
    model = recording_chat_openai(bodies, model="gpt-4o-mini", base_url=base_url)
    middleware = TrimmingMiddleware(PriorityTrimmer(2000), recall=False, **options)
    return create_agent(model, [], system_prompt="Be brief.", middleware=[middleware])


def _ask(agent: Any, *questions: str) -> None:
    messages: list[Any] = []
    for question in questions:
        messages = agent.invoke({"messages": [*messages, HumanMessage(question)]})["messages"]


def test_on_openai_every_call_of_a_conversation_sends_one_key_and_another_one_another() -> None:
    bodies: list[dict[str, Any]] = []
    agent = _agent("https://api.openai.com/v1", bodies)
    _ask(agent, "Plan my trip to Porto.", "And the hotel?")
    _ask(agent, "Something else entirely.")
    keys = [body.get("prompt_cache_key") for body in bodies]
    assert keys[0] is not None and keys[0].startswith("agent-latency-")
    assert keys[1] == keys[0]
    assert keys[2] is not None and keys[2] != keys[0]


@pytest.mark.parametrize(("option", "sent"), [(None, False), (True, True), (False, False)])
def test_other_servers_get_the_key_only_when_asked(option: bool | None, sent: bool) -> None:
    bodies: list[dict[str, Any]] = []
    agent = _agent("http://127.0.0.1:9/v1", bodies, cache_key=option)
    _ask(agent, "Plan my trip to Porto.")
    assert ("prompt_cache_key" in bodies[0]) is sent


def test_the_per_call_copies_that_carry_the_key_are_not_serialised_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key rides on a copy of the model made for each call. LangChain serialises a chat model
    for its callbacks on each new object's first call (80 us for a ChatOpenAI): each copy
    carries its model's, made once, or every call would pay it."""
    serialised: list[object] = []
    real = chat_models.dumpd
    monkeypatch.setattr(chat_models, "dumpd", lambda obj: serialised.append(obj) or real(obj))
    bodies: list[dict[str, Any]] = []
    _ask(_agent("https://api.openai.com/v1", bodies), "Plan my trip.", "And the hotel?", "Train?")
    assert len({body["prompt_cache_key"] for body in bodies}) == 1
    assert len(bodies) == 3
    assert serialised == []


def test_a_cache_key_option_is_checked() -> None:
    with pytest.raises(TypeError, match="cache_key"):
        TrimmingMiddleware(PriorityTrimmer(2000), cache_key="yes")  # type: ignore[arg-type]


@pytest.mark.xfail(
    strict=True,
    reason="a trade-off: only the first system message goes into the key, so that a system "
    "message an app adds before the first user message on some calls only does not change a "
    "conversation's key (test_attack19b_cache_key_per_call_context); conversations told apart "
    "only by a second system message share one",
)
def test_conversations_opening_with_other_system_messages_send_other_keys() -> None:
    # An app's system prompt, then each customer's profile, then "Hi": their prompts part at the
    # profile, yet every customer sends one key on OpenAI's API, which spreads a key's requests
    # past about 15 a minute (attack19).
    bodies: list[dict[str, Any]] = []
    agent = _agent("https://api.openai.com/v1", bodies)
    for profile in ("Customer: Alice Jones, plan Gold.", "Customer: Bob Smith, plan Free."):
        agent.invoke({"messages": [SystemMessage(profile), HumanMessage("Hi")]})
    alice, bob = (body.get("prompt_cache_key") for body in bodies)
    assert alice is not None and bob is not None
    assert alice != bob
