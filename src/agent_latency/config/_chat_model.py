"""The channel as a LangChain chat model: one OpenAI-compatible endpoint and key, many models.

Imported on first use (``agent_latency.build_chat_model``): it loads langchain_openai and openai.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import openai
from langchain_core.language_models import LanguageModelInput
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from agent_latency.config._channel import check_base_url, output_limit_field
from agent_latency.config._settings import MAX_TOKENS_PARAMS, Settings

_NO_KEY = "EMPTY"
_SERVER_TIMINGS = ("timings", "metrics")
"""Top-level fields of a server's own timing of a call, which ChatOpenAI drops: llama.cpp's
``timings`` and vLLM's per-request ``metrics`` (``--enable-per-request-metrics``)."""


def build_chat_model(settings: Settings | None = None, **overrides: Any) -> ChatOpenAI:
    """Builds a ``ChatOpenAI`` for the configured channel.

    Switching models is a one-field change (``model=`` here, or ``llm.model`` in ``config.toml``).
    Usage is requested on streamed calls too (``stream_usage=True``), so a callback handler sees
    the server's ``usage.prompt_tokens`` for every call. The key is sent without surrounding
    whitespace (a key read from a file often ends in a newline, which no header may carry).

    Args:
        settings: The loaded settings; ``None`` uses the defaults.
        **overrides: ``ChatOpenAI`` fields that win over the settings (e.g. ``model``,
            ``streaming``, ``max_tokens``, ``callbacks``).

    Returns:
        The chat model, with the output limit sent as the field the endpoint understands.

    Raises:
        ValueError: When ``settings.llm.max_tokens_param`` is not a known field name, or the
            base URL is not an http(s) URL or carries a user name or password (httpx would send
            them as Basic auth in place of the key).
    """
    settings = settings or Settings()
    if settings.llm.max_tokens_param not in MAX_TOKENS_PARAMS:
        raise ValueError(
            f"llm.max_tokens_param: {settings.llm.max_tokens_param!r} is invalid. "
            f"Fix: use one of {', '.join(MAX_TOKENS_PARAMS)}."
        )
    llm = settings.llm
    fields: dict[str, Any] = {
        "model": llm.model,
        "base_url": llm.base_url,
        "timeout": llm.timeout_seconds,
        "temperature": settings.streaming.temperature,
        "streaming": settings.streaming.enabled,
        "stream_usage": True,
        "max_tokens": settings.streaming.max_tokens,
    }
    fields.update(overrides)
    # An overridden base_url decides the key fallback and the output-limit field too.
    base_url = fields["base_url"]
    if base_url is not None:
        check_base_url(base_url, "base_url" if "base_url" in overrides else "llm.base_url")
    if "api_key" not in fields:
        if llm.api_key is not None:
            fields["api_key"] = llm.api_key
        elif base_url is not None and not os.environ.get("OPENAI_API_KEY"):
            # Local servers (vLLM, llama.cpp, the simulator) need no key, but the openai client
            # refuses to start without one.
            fields["api_key"] = _NO_KEY
    key = fields.get("api_key")
    if isinstance(key, SecretStr):
        fields["api_key"] = SecretStr(key.get_secret_value().strip())
    elif isinstance(key, str):
        fields["api_key"] = key.strip()
    fields["output_limit_field"] = output_limit_field(llm.max_tokens_param, base_url)
    return CompatibleChatOpenAI(**fields)


class CompatibleChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that speaks to OpenAI-compatible servers as they are.

    ChatOpenAI always sends ``max_completion_tokens``; with ``output_limit_field="max_tokens"``
    the request carries ``max_tokens`` instead, whether the limit comes from the model's fields
    or from a single call (``model.invoke(..., max_tokens=5)``). And it keeps the server's own
    timing of the call, which ChatOpenAI drops, in the answer's ``response_metadata``:
    llama.cpp's top-level ``timings`` (how long it prefilled, how many prompt tokens it took
    from its cache) and vLLM's per-request ``metrics``, from the body of a blocking call and
    from the closing chunk of a stream, where the servers put them (a structured output's
    stream too). A stream keeps the first closing chunk's figures only: LangChain merges the
    chunks, and two different figures under one name would fail the caller's stream.
    """

    output_limit_field: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if self.output_limit_field == "max_tokens" and "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        return payload

    def _create_chat_result(
        self,
        response: dict[str, Any] | openai.BaseModel,
        generation_info: dict[str, Any] | None = None,
    ) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        fields = response if isinstance(response, dict) else (response.model_extra or {})
        for generation in result.generations:
            _copy_timings(fields, generation.message.response_metadata)
        return result

    def _convert_chunk_to_generation_chunk(
        self,
        chunk: dict[str, Any],
        default_chunk_class: type,
        base_generation_info: dict[str, Any] | None,
    ) -> ChatGenerationChunk | None:
        generation_chunk = super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )
        # A response_format's stream (openai's beta stream) wraps each chunk in an event.
        raw = chunk.get("chunk") if chunk.get("type") == "chunk" else chunk
        if generation_chunk is None or not isinstance(raw, dict) or not _ends_stream(raw):
            # Only the stream's end: with timings_per_token every chunk carries running
            # figures, and LangChain's merge of the chunks refuses two different floats.
            return generation_chunk
        _copy_timings(raw, generation_chunk.message.response_metadata)
        return generation_chunk

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        kept: set[str] = set()
        for generation_chunk in super()._stream(*args, **kwargs):
            _keep_timings_once(generation_chunk, kept)
            yield generation_chunk

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        kept: set[str] = set()
        async for generation_chunk in super()._astream(*args, **kwargs):
            _keep_timings_once(generation_chunk, kept)
            yield generation_chunk


def _copy_timings(fields: dict[str, Any], metadata: dict[str, Any]) -> None:
    for name in _SERVER_TIMINGS:
        if isinstance(timings := fields.get(name), dict):
            metadata[name] = dict(timings)


def _ends_stream(chunk: dict[str, Any]) -> bool:
    """Whether a stream chunk is the usage chunk (no choices) or carries a finish reason."""
    choices = chunk.get("choices")
    if not choices:
        return True
    return any(isinstance(c, dict) and c.get("finish_reason") for c in choices)


def _keep_timings_once(generation_chunk: ChatGenerationChunk, kept: set[str]) -> None:
    """Drops a server timing that an earlier chunk of the same stream already carried (a server
    or proxy may repeat it on the finish chunk and the usage chunk; see the class)."""
    metadata = generation_chunk.message.response_metadata
    for name in _SERVER_TIMINGS:
        if name in metadata:
            if name in kept:
                del metadata[name]
            kept.add(name)
