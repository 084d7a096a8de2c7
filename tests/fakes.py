"""Test doubles shared by test modules: a scripted tool-calling model, a recording handler."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from agent_latency._trace_link import TRIM_EVENT


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
