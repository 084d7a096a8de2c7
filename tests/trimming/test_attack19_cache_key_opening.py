"""Attacks on the per-conversation ``prompt_cache_key`` (helper attack19).

docs/trimming.md: every call of a conversation carries one key "derived from its system prompt
and first user message", so that calls sharing a key share a prefix (``_cache_key``:
"Conversations that begin alike share a key, as they share a prefix"). Defect fixed (the test
failed before): a second system message before the first user message (the customer's profile
an app puts in each conversation's input, after the agent's system prompt) was left out of the
key. Every customer's conversation opening with "Hi" then sent the same key
on OpenAI's API, whose prefixes part after the system prompt: OpenAI routes a key's requests to
the same machines and spreads them once a key passes about 15 requests a minute, so the key
routes a whole service's traffic as one conversation.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware


def keys_sent(*profiles: str) -> list[str | None]:
    """The ``prompt_cache_key`` each customer's first call sends to OpenAI's API."""
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        created = {"id": "1", "object": "chat.completion", "created": 0, "model": "m"}
        return httpx.Response(200, json={**created, "choices": [choice]})

    model = ChatOpenAI(
        model="gpt-4o-mini",
        api_key="sk-test",  # type: ignore[arg-type]
        base_url="https://api.openai.com/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
        max_retries=0,
    )
    middleware = TrimmingMiddleware(PriorityTrimmer(2000), recall=False)
    agent = create_agent(
        model, [], system_prompt="You are Acme's support.", middleware=[middleware]
    )
    for profile in profiles:
        agent.invoke({"messages": [SystemMessage(profile), HumanMessage("Hi")]})
    return [body.get("prompt_cache_key") for body in bodies]


# Failed before every system message before the first user message went into the key.
def test_conversations_opening_with_other_system_messages_send_other_keys() -> None:
    alice, bob = keys_sent(
        "Customer: Alice Jones, plan Gold, account 1183.",
        "Customer: Bob Smith, plan Free, account 2291.",
    )
    assert alice is not None and bob is not None
    assert alice != bob  # their prompts part at the profile: no prefix past the system prompt
