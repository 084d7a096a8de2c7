"""Test doubles shared by test modules: a scripted tool-calling model, a recording handler, a
transport that drops a request field as some servers do, one that keeps the request bodies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import httpx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from agent_latency.semconv import TRIM_SPAN_NAME as TRIM_EVENT


class ToolCallingFake(GenericFakeChatModel):
    """A scripted chat model that accepts ``bind_tools`` (``create_agent`` calls it)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


class Recorder(BaseCallbackHandler):
    """Records what the model was sent, the chains started, custom events and prompt usage.

    Attributes:
        prompts: The messages of each chat-model call, in order.
        chains: The name of each chain run started, by run id.
        events: Each custom event as (name, data, run id).
        server_tokens: The ``usage_metadata["input_tokens"]`` of each model answer that has it.
    """

    def __init__(self) -> None:
        self.prompts: list[list[BaseMessage]] = []
        self.chains: dict[UUID, str] = {}
        self.events: list[tuple[str, Any, UUID]] = []
        self.server_tokens: list[int] = []

    @property
    def trims(self) -> list[Any]:
        """The ``TrimResult`` of each trim event, in order."""
        return [data for name, data, _ in self.events if name == TRIM_EVENT]

    def on_chat_model_start(
        self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.prompts.append(messages[0])

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.chains[run_id] = kwargs.get("name", "")

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data, run_id))

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        generation = response.generations[0][0]
        usage = (
            generation.message.usage_metadata if isinstance(generation, ChatGeneration) else None
        )
        if usage is not None:
            self.server_tokens.append(usage["input_tokens"])


class DropsRequestField(httpx.HTTPTransport):
    """Forwards to the simulator without one field of each request body, as llama-cpp-python's
    server drops the fields it does not know (``max_completion_tokens``: it then answers at full
    length; ``stream_options``: no usage chunk ends a stream)."""

    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = json.loads(request.read())
            body.pop(self.field, None)
            headers = [(k, v) for k, v in request.headers.items() if k != "content-length"]
            request = httpx.Request("POST", request.url, headers=headers, json=body)
        return super().handle_request(request)


class KeepsRequestBodies(httpx.HTTPTransport):
    """Forwards each request (to the simulator) and keeps its JSON body in ``sent``."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.read()))
        return super().handle_request(request)
