"""Prompts and answers in the GenAI conventions' message format (only with capture_content)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from agent_latency._chat_format import escape_surrogates, role_of
from agent_latency.telemetry._langchain import first_str


def to_json(value: object) -> str:
    """``value`` as JSON; what JSON cannot hold is written as its ``str``: a part of it (an
    object), or the whole value when JSON cannot hold its shape (keys that are not strings, a
    value that contains itself), where ``default`` is not asked and ``json.dumps`` raises."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json.dumps(str(value), ensure_ascii=False)
    return escape_surrogates(text)


def _parts(message: BaseMessage) -> list[dict[str, Any]]:
    """A message's parts in the GenAI conventions' message format."""
    if isinstance(message, ToolMessage):
        return [
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        ]
    content = message.content
    blocks: list[Any] = [content] if isinstance(content, str) else list(content)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, str):
            if block:
                parts.append({"type": "text", "content": block})
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif isinstance(block, Mapping):
            parts.append({"type": str(block.get("type", "unknown"))})
    for call in getattr(message, "tool_calls", None) or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("args"),
            }
        )
    return parts


def messages_json(messages: Sequence[BaseMessage]) -> str:
    """A chat prompt as ``gen_ai.input.messages``."""
    return to_json([{"role": role_of(message), "parts": _parts(message)} for message in messages])


def prompts_json(prompts: Sequence[str]) -> str:
    """A completion model's prompts as ``gen_ai.input.messages`` (each a user message)."""
    return to_json([{"role": "user", "parts": [{"type": "text", "content": p}]} for p in prompts])


def output_json(response: LLMResult) -> str:
    """A model's answer as ``gen_ai.output.messages``."""
    outputs = []
    for generation in response.generations[0] if response.generations else ():
        info = generation.generation_info or {}
        if isinstance(generation, ChatGeneration):
            metadata = generation.message.response_metadata or {}
            parts = _parts(generation.message)
        else:
            metadata = {}
            parts = [{"type": "text", "content": generation.text}]
        reason = first_str(info.get("finish_reason"), metadata.get("finish_reason")) or "stop"
        outputs.append({"role": "assistant", "parts": parts, "finish_reason": reason})
    return to_json(outputs)
