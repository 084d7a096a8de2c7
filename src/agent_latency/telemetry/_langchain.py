"""What the handler reads from LangChain's callback arguments: model, endpoint, names, usage.

LangChain passes these fields loosely typed (``serialized`` constructor arguments, metadata,
invocation parameters, an ``LLMResult``); every reader here accepts anything and returns
``None`` (or nothing) for what it does not recognise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agent_latency._redaction import host_and_port
from agent_latency._validation import is_integer

# LangChain's ``ls_provider`` values mapped to ``gen_ai.provider.name`` where they differ.
_PROVIDERS: Final = {
    "azure": gen_ai.GenAiProviderNameValues.AZURE_AI_OPENAI.value,
    "amazon_bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "google_genai": gen_ai.GenAiProviderNameValues.GCP_GEN_AI.value,
    "google_vertexai": gen_ai.GenAiProviderNameValues.GCP_VERTEX_AI.value,
    "mistralai": gen_ai.GenAiProviderNameValues.MISTRAL_AI.value,
    "xai": gen_ai.GenAiProviderNameValues.X_AI.value,
}
# Constructor fields under which LangChain integrations serialise their endpoint.
_ENDPOINT_FIELDS: Final = ("openai_api_base", "base_url", "azure_endpoint", "api_base", "endpoint")
_CREATE_AGENT: Final = "langchain_create_agent"
_CACHE_READ: Final = "cache_read"
_CACHE_CREATION: Final = "cache_creation"
_DEEPSEEK_CACHE_HIT: Final = "prompt_cache_hit_tokens"


def first_str(*values: object) -> str | None:
    """The first of ``values`` that is a non-empty string."""
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def first_int(*values: object) -> int | None:
    """The first of ``values`` that is an integer (not a bool)."""
    return next((value for value in values if is_integer(value)), None)


def requested_model(metadata: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """The model a call asks for, from LangChain's metadata or invocation parameters."""
    return first_str(
        metadata.get("ls_model_name"),
        params.get("model"),
        params.get("model_name"),
        params.get("model_id"),
    )


def provider_name(metadata: Mapping[str, Any]) -> str:
    """``gen_ai.provider.name`` from LangChain's ``ls_provider`` (``"unknown"`` without it)."""
    provider = metadata.get("ls_provider")
    return _PROVIDERS.get(provider, provider) if isinstance(provider, str) else "unknown"


def run_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    """A run's name: the ``name`` LangChain passes, else the serialised class name."""
    name = first_str(kwargs.get("name"), (serialized or {}).get("name"))
    if name is None:
        ids = (serialized or {}).get("id")
        name = first_str(ids[-1]) if isinstance(ids, list) and ids else None
    return name or "unnamed"


def is_agent(name: str, metadata: Mapping[str, Any]) -> bool:
    """Whether a chain run is the graph of a ``langchain.agents.create_agent`` agent."""
    if metadata.get("ls_integration") != _CREATE_AGENT:
        return False
    agent_name = metadata.get("lc_agent_name")
    # Nodes inherit the agent's metadata; the graph itself carries its own name (or, unnamed,
    # is the run outside any node).
    return name == agent_name if agent_name else "langgraph_node" not in metadata


def server(serialized: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """The endpoint's host and port, from the model's serialised constructor arguments."""
    fields = (serialized or {}).get("kwargs")
    if not isinstance(fields, Mapping):
        return None
    url = first_str(*(fields.get(name) for name in _ENDPOINT_FIELDS))
    return None if url is None else host_and_port(url)


@dataclass(frozen=True, slots=True)
class Response:
    """The fields of an ``LLMResult`` the span, metrics and record use.

    Token counts are ``None`` where the server said nothing (never a stand-in 0).

    Attributes:
        model: The model that answered.
        id: The completion id.
        finish_reasons: One per generation, when given.
        input_tokens: Prompt tokens the server reported (cached ones included).
        output_tokens: Completion tokens the server reported.
        cache_read_tokens: Prompt tokens the server read from its prefix cache.
        cache_creation_tokens: Prompt tokens the server wrote to its cache (Anthropic-style).
    """

    model: str | None = None
    id: str | None = None
    finish_reasons: tuple[str, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None

    @property
    def prefilled_tokens(self) -> int | None:
        """Prompt tokens the server had to prefill: those it did not read from its cache."""
        if self.input_tokens is None or self.cache_read_tokens is None:
            return None
        return max(0, self.input_tokens - self.cache_read_tokens)


def _detail(details: object, kind: str) -> int | None:
    """Sums ``kind`` and its service-tier variants (``priority_cache_read``) of a details dict."""
    if not isinstance(details, Mapping):
        return None
    counts = [
        value
        for key, value in details.items()
        if isinstance(key, str)
        and (key == kind or key.endswith(f"_{kind}"))
        and first_int(value) is not None
    ]
    return sum(counts) if counts else None


def response_details(response: LLMResult | None) -> Response:
    """Reads an ``LLMResult``: ``usage_metadata`` first, the raw ``token_usage`` as a fallback.

    Cache reads come from ``usage_metadata["input_token_details"]`` (LangChain's mapping of
    OpenAI's ``prompt_tokens_details.cached_tokens``), else from DeepSeek's
    ``prompt_cache_hit_tokens`` in the raw usage, which LangChain passes on for blocking calls
    only.
    """
    if response is None:
        return Response()
    llm_output: Mapping[str, Any] = response.llm_output or {}
    model = first_str(llm_output.get("model_name"), llm_output.get("model"))
    response_id = first_str(llm_output.get("id"))
    finish_reasons: list[str] = []
    input_tokens = output_tokens = cache_read = cache_creation = None
    for generation in response.generations[0] if response.generations else ():
        info: Mapping[str, Any] = generation.generation_info or {}
        metadata: Mapping[str, Any] = {}
        if isinstance(generation, ChatGeneration):
            message = generation.message
            metadata = message.response_metadata or {}
            usage = getattr(message, "usage_metadata", None)
            if usage:
                input_tokens = first_int(usage.get("input_tokens"))
                output_tokens = first_int(usage.get("output_tokens"))
                details = usage.get("input_token_details")
                cache_read = _detail(details, _CACHE_READ)
                cache_creation = _detail(details, _CACHE_CREATION)
            message_id = message.id if not (message.id or "").startswith("lc_") else None
            response_id = response_id or first_str(metadata.get("id"), message_id)
        model = model or first_str(metadata.get("model_name"), metadata.get("model"))
        reason = first_str(info.get("finish_reason"), metadata.get("finish_reason"))
        if reason is not None:
            finish_reasons.append(reason)
    raw = llm_output.get("token_usage")
    if isinstance(raw, Mapping):
        if input_tokens is None and output_tokens is None:
            input_tokens = first_int(raw.get("prompt_tokens"))
            output_tokens = first_int(raw.get("completion_tokens"))
        if cache_read is None:
            cache_read = first_int(
                raw.get(_DEEPSEEK_CACHE_HIT),
                _detail(raw.get("prompt_tokens_details"), "cached_tokens"),
            )
    return Response(
        model,
        response_id,
        tuple(finish_reasons),
        input_tokens,
        output_tokens,
        cache_read,
        cache_creation,
    )
