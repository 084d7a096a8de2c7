"""A per-conversation prompt cache key, for servers that route or cache by one.

OpenAI's ``prompt_cache_key`` sends requests that share it to the same machines, whose caches
then hold their prefix. The key here is derived from the conversation's first messages (its
system prompt and first user message), so every call of a conversation and every replica
serving it send the same one, with no state to share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from langchain_core.messages import BaseMessage

from agent_latency._chat_format import role_of
from agent_latency.trimming._relevance import text_of

CACHE_KEY_SETTING: Final = "prompt_cache_key"
"""The request field (and ``ChatOpenAI`` keyword) that carries the key."""
_OPENAI_HOST: Final = "api.openai.com"


def conversation_cache_key(messages: Sequence[BaseMessage]) -> str | None:
    """The key of the conversation ``messages`` belong to; ``None`` before its first user message.

    Conversations that begin alike share a key, as they share a prefix.
    """
    roles = [role_of(message) for message in messages]
    first_user = next((m for m, role in zip(messages, roles, strict=True) if role == "user"), None)
    if first_user is None:
        return None
    system = next(
        (
            text_of(m)
            for m, role in zip(messages, roles, strict=True)
            if role in ("system", "developer")
        ),
        "",
    )
    digest = hashlib.sha256(f"{system}\0{text_of(first_user)}".encode()).hexdigest()
    return f"agent-latency-{digest[:32]}"


def takes_cache_key(model: object) -> bool:
    """Whether ``model`` sends to a server known to take ``prompt_cache_key`` (OpenAI's own API:
    a ``ChatOpenAI`` with no base URL, or one on api.openai.com)."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a core dependency
        return False
    if not isinstance(model, ChatOpenAI):
        return False
    base = model.openai_api_base
    return base is None or urlsplit(base).hostname == _OPENAI_HOST
