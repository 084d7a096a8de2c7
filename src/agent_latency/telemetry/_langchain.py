"""What the handler reads from LangChain's loosely typed callback arguments: model, endpoint,
names, answer. Every reader accepts anything and returns ``None`` for what it does not know."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers import event_stream
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agent_latency._redaction import host_and_port
from agent_latency._server_usage import ServerUsage, usage_of_body, usage_of_message
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
_OPENAI_BASE_ENV: Final = ("OPENAI_API_BASE", "OPENAI_BASE_URL")
_CREATE_AGENT: Final = "langchain_create_agent"
_NOTHING_REPORTED: Final = ServerUsage()
# The methods of a LangChain chat model that stream its answer.
_STREAMING_METHODS: Final = frozenset({"_stream", "_astream"})


def first_str(*values: object) -> str | None:
    """The first of ``values`` that is a non-empty string."""
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def first_int(*values: object) -> int | None:
    """The first of ``values`` that is an integer (not a bool)."""
    return next((value for value in values if is_integer(value)), None)


def blocks_carry_content(blocks: object) -> bool:
    """Whether a chunk's list of content blocks (a v1 message's) carries output: a non-empty
    text, a tool-call fragment or any other block, but not a reasoning model's thinking
    (``reasoning`` blocks), which the v0 message keeps out of its content too."""
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, str):
            if block:
                return True
        elif isinstance(block, Mapping):
            kind = block.get("type")
            if (kind == "text" and block.get("text")) or kind not in ("text", "reasoning"):
                return True
    return False


def event_carries_content(event: object) -> bool:
    """Whether an event of LangChain's streaming protocol carries output: a content-block
    delta, but not a reasoning one (a reasoning model's thinking)."""
    if not isinstance(event, Mapping) or event.get("event") != "content-block-delta":
        return False
    delta = event.get("delta")
    return not (isinstance(delta, Mapping) and delta.get("type") == "reasoning-delta")


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


def closed_event_stream(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is the one ``astream_events`` runs its runnable in, cancelled only
    because its consumer closed the stream.

    ``astream_events`` cancels its ``consume_astream`` task once when the consumer walks away,
    twice when the consumer's own task is cancelled: the count of requests tells them apart.
    """
    code = getattr(task.get_coro(), "cr_code", None)
    return (
        code is not None
        and code.co_name == "consume_astream"
        and code.co_filename == event_stream.__file__
        and task.cancelling() == 1
    )


def raised_while_streaming(error: BaseException) -> bool:
    """Whether ``error`` came through a chat model's ``_stream`` or ``_astream``: the call
    streamed, though LangChain started it with the model's own ``stream`` parameter
    (``ChatOpenAI().stream(...)`` and LangGraph's messages mode start with ``stream=False``)."""
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_name in _STREAMING_METHODS:
            return True
        trace = trace.tb_next
    return False


def context_run() -> UUID | None:
    """The run the calling code runs in, by LangChain's context (the config a runnable hands its
    children: a tool's body, a lambda's), whether or not the new run was given that config."""
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    run_id = getattr(callbacks, "parent_run_id", None)
    return run_id if isinstance(run_id, UUID) else None


def server(
    serialized: Mapping[str, Any] | None, metadata: Mapping[str, Any]
) -> tuple[str, int] | None:
    """The endpoint's host and port, from the model's serialised constructor arguments; for an
    OpenAI model given none, from where its client takes it: ``OPENAI_API_BASE`` (LangChain's),
    else ``OPENAI_BASE_URL`` (the openai SDK's). ``None`` for OpenAI's own API, as the latency
    models key it (``LatencyModels.model_for_base_url``)."""
    fields = (serialized or {}).get("kwargs")
    url = (
        first_str(*(fields.get(name) for name in _ENDPOINT_FIELDS))
        if isinstance(fields, Mapping)
        else None
    )
    if url is None and metadata.get("ls_provider") == "openai":
        url = first_str(*(os.environ.get(name) for name in _OPENAI_BASE_ENV))
    return None if url is None else host_and_port(url)


@dataclass(frozen=True, slots=True)
class Response:
    """The fields of an ``LLMResult`` the span, metrics and record use.

    Attributes:
        model: The model that answered.
        id: The completion id.
        finish_reasons: One per generation, when given.
        usage: What the server reported about the call (``None`` where it said nothing, never a
            stand-in 0), as :func:`agent_latency._server_usage.usage_of_message` reads it.
    """

    model: str | None = None
    id: str | None = None
    finish_reasons: tuple[str, ...] = ()
    usage: ServerUsage = field(default_factory=ServerUsage)


def response_details(response: LLMResult | None) -> Response:
    """Reads an ``LLMResult``: names from its generations and ``llm_output``, the usage from
    its answer message, else (a completion model's result) from ``llm_output["token_usage"]``.
    """
    if response is None:
        return Response()
    llm_output: Mapping[str, Any] = response.llm_output or {}
    model = first_str(llm_output.get("model_name"), llm_output.get("model"))
    response_id = first_str(llm_output.get("id"))
    finish_reasons: list[str] = []
    usage: ServerUsage | None = None
    for generation in response.generations[0] if response.generations else ():
        info: Mapping[str, Any] = generation.generation_info or {}
        metadata: Mapping[str, Any] = {}
        if isinstance(generation, ChatGeneration):
            message = generation.message
            metadata = message.response_metadata or {}
            if usage is None:
                usage = usage_of_message(message)
            message_id = message.id if not (message.id or "").startswith("lc_") else None
            response_id = response_id or first_str(metadata.get("id"), message_id)
        model = model or first_str(metadata.get("model_name"), metadata.get("model"))
        reason = first_str(info.get("finish_reason"), metadata.get("finish_reason"))
        if reason is not None:
            finish_reasons.append(reason)
    if usage is None or usage == _NOTHING_REPORTED:
        # LangChain copies llm_output into the message's metadata for a chat model; a
        # completion model (and a result built by hand) keeps the raw usage there only.
        usage = usage_of_body({"usage": llm_output.get("token_usage")})
    return Response(model, response_id, tuple(finish_reasons), usage)
