"""Starts llama-cpp-python's OpenAI-compatible server with a ChatML format that keeps tool turns.

The server's built-in ``chatml`` format keeps only system, user and assistant text: ``tool``
messages and the tool calls of assistant messages vanish from the prompt, so an agent transcript
shrinks to a fraction of its size and trimming it changes little. This launcher registers
``chatml-tools`` (ChatML with every message kept and tool calls written as JSON, as Qwen-style
templates do) and then runs the stock server with the command-line arguments it was given.

Run it with the interpreter of the environment that has ``llama-cpp-python[server]``::

    .venv-real/bin/python benchmarks/real_server.py --model FILE --chat_format chatml-tools ...
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format
from llama_cpp.server.__main__ import main

CHAT_FORMAT = "chatml-tools"
_END = "<|im_end|>"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _render(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call["function"]
        text += (
            f'\n<tool_call>\n{{"name": {json.dumps(function["name"])}, '
            f'"arguments": {function["arguments"]}}}\n</tool_call>'
        )
    return f"<|im_start|>{message['role']}\n{text}{_END}\n"


@register_chat_format(CHAT_FORMAT)
def format_chatml_tools(messages: list[dict[str, Any]], **_: Any) -> ChatFormatterResponse:
    """Renders every message, tool results and tool calls included, as ChatML."""
    prompt = "".join(_render(message) for message in messages) + "<|im_start|>assistant\n"
    return ChatFormatterResponse(prompt=prompt, stop=_END)


if __name__ == "__main__":
    main()
