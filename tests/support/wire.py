"""What the real ChatOpenAI puts on the wire, captured without a server."""

from __future__ import annotations

import json
from typing import Any

import httpx
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI


def chat_completion(text: str) -> httpx.Response:
    """A chat completion of one assistant message, as an OpenAI server answers."""
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return httpx.Response(
        200,
        json={
            "id": "1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [choice],
        },
    )


def recording_chat_openai(
    bodies: list[dict[str, Any]],
    *,
    model: str = "m",
    base_url: str = "http://127.0.0.1:9/v1",
) -> ChatOpenAI:
    """The real ChatOpenAI, its requests' bodies added to ``bodies`` and each answered "ok"
    (``base_url`` OpenAI's API's: the fields only it takes are sent)."""

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return chat_completion("ok")

    return ChatOpenAI(
        model=model,
        api_key="sk-test",  # type: ignore[arg-type]
        base_url=base_url,
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
        max_retries=0,
    )


def sent_request(messages: list[BaseMessage], tools: list[Any]) -> dict[str, Any]:
    """Returns the request body the real ChatOpenAI sends for ``messages`` and ``tools``."""
    bodies: list[dict[str, Any]] = []
    model = recording_chat_openai(bodies)
    (model.bind_tools(tools) if tools else model).invoke(messages)
    return bodies[0]
