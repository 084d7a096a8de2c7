"""The order of roles chat templates accept, as the servers that apply them refuse others."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def roles(messages: Sequence[BaseMessage]) -> list[str]:
    """The OpenAI roles of LangChain messages, as ChatOpenAI sends them."""
    return [_ROLES[message.type] for message in messages]


def gemma_template_accepts(roles: list[str]) -> bool:
    """The rule of Gemma's chat template (Gemma 2 and 3 on Hugging Face, as vLLM and llama.cpp's
    ``--jinja`` apply it; Mistral's and Llama 2's are alike): an optional first system message,
    then user and assistant turns alternating from a user one, else ``raise_exception``."""
    turns = roles[1:] if roles[:1] == ["system"] else roles
    return all(role == ("user" if i % 2 == 0 else "assistant") for i, role in enumerate(turns))
