"""Attack on 5f969c4 (helper attack19b): ``prompt_cache_key`` takes every system message before
the first user message.

docs/trimming.md: every call of a conversation carries one key. An app that puts what it
retrieved for the question in a system message at the head of the conversation, on the calls
that found something (a memory middleware listed before ``TrimmingMiddleware``; the app's system
prompt stays first), now sends another key on those calls: one conversation's calls carry two
keys (here, its first turn one, its second another), and OpenAI's API routes them apart, so the
system prompt and tools the calls share are cached twice. Before 5f969c4 the key took the first
system message only, and the conversation kept one key.

This is the other side of 5f969c4's fix (a customer profile given as a second system message
parted conversations that share only the app's prompt): a trade-off. 5f969c4 is reverted: a
conversation's calls share one key (the promise), and conversations told apart only by a second
system message share one too (a strict xfail in test_cache_key.py). Remembering the key of a
conversation's first call would take state the replicas do not share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from support.wire import recording_chat_openai

from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware


class Memories(AgentMiddleware[Any, Any, Any]):
    """Puts what it recalls of the user at the head of the conversation, when the question
    asks about something it knows."""

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        if "units" not in request.messages[-1].text:
            return handler(request)
        memory = SystemMessage("What you know of the user: prefers metric units.")
        return handler(request.override(messages=[memory, *request.messages]))


def keys_sent() -> list[str | None]:
    """The ``prompt_cache_key`` of each call of one conversation of two turns."""
    bodies: list[dict[str, Any]] = []
    model = recording_chat_openai(bodies, model="gpt-4o-mini", base_url="https://api.openai.com/v1")
    middleware = [Memories(), TrimmingMiddleware(PriorityTrimmer(2000), recall=False)]
    agent = create_agent(model, [], system_prompt="You plan trips.", middleware=middleware)
    messages: list[BaseMessage] = [HumanMessage("Plan my trip to Porto.")]
    messages = agent.invoke({"messages": messages})["messages"]
    agent.invoke({"messages": [*messages, HumanMessage("Which units are the distances in?")]})
    return [body.get("prompt_cache_key") for body in bodies]


# Failed on 5f969c4 (every system message before the first user message went into the key).
def test_attack19b_one_conversation_sends_one_key() -> None:
    first, second = keys_sent()
    assert first is not None
    assert second == first
