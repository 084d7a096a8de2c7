"""What a server reported about one call: its usage, its prefix cache, its own timings.

:class:`ServerUsage` is read from a raw response body (:func:`usage_of_body`) or from a LangChain
message (:func:`usage_of_message`): the one reader of every provider's shape (OpenAI, DeepSeek,
llama.cpp's ``timings``, vLLM's ``metrics``), which names the impossible counts it drops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from agent_latency._validation import is_number

MAX_REPORTED_TOKENS: Final = 100_000_000
"""More tokens than any context window holds: a reported count above it is impossible."""
_DAY_MS: Final = 86_400_000.0


@dataclass(frozen=True, slots=True)
class ServerUsage:
    """What a server reported about one call; ``None`` where it said nothing (never a stand-in 0).

    Attributes:
        prompt_tokens: ``usage.prompt_tokens`` (cached ones included).
        completion_tokens: ``usage.completion_tokens``.
        cached_tokens: Prompt tokens read from the prefix cache: OpenAI's
            ``prompt_tokens_details.cached_tokens`` (and service-tier variants), DeepSeek's
            ``prompt_cache_hit_tokens``, or llama.cpp's ``timings.cache_n``.
        cache_creation_tokens: Prompt tokens written to the cache (Anthropic-style).
        prefill_ms: How long the server says it prefilled: llama.cpp's ``timings.prompt_ms``, or
            vLLM's ``metrics.time_to_first_token_ms`` (``--enable-per-request-metrics``: from
            scheduling to the first token, its queue excluded).
        prefill_tokens: How many tokens that prefill took in (``timings.prompt_n``).
        decode_ms: How long the server says it generated the answer, from its first output token
            to its last: ``timings.predicted_ms``, or vLLM's ``metrics.generation_time_ms``.
        invalid: The reported fields that were impossible (negative, not a whole number, above
            :data:`MAX_REPORTED_TOKENS`, more cached than prompt tokens); their values are
            ``None`` here.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    prefill_ms: float | None = None
    prefill_tokens: int | None = None
    decode_ms: float | None = None
    invalid: tuple[str, ...] = ()

    @property
    def prefilled_tokens(self) -> int | None:
        """Prompt tokens the server had to prefill: those it did not read from its cache."""
        if self.prefill_tokens is not None:
            return self.prefill_tokens
        if self.prompt_tokens is None or self.cached_tokens is None:
            return None
        return self.prompt_tokens - self.cached_tokens


class _Reader:
    """Reads counts from loosely typed mappings, noting the impossible ones by name."""

    def __init__(self) -> None:
        self.invalid: list[str] = []

    def count(self, source: object, field: str, name: str) -> int | None:
        value = source.get(field) if isinstance(source, Mapping) else None
        if value is None:
            return None
        # llama.cpp and some proxies send whole counts as floats (12.0).
        if is_number(value) and value == int(value) and 0 <= value <= MAX_REPORTED_TOKENS:
            return int(value)
        self.invalid.append(name)
        return None

    def detail(self, details: object, kind: str) -> int | None:
        """Sums ``kind`` and its service-tier variants (``priority_cache_read``) in ``details``."""
        if not isinstance(details, Mapping):
            return None
        name = "cache_creation_tokens" if kind == "cache_creation" else "cached_tokens"
        found = [
            self.count(details, key, name)
            for key in details
            if isinstance(key, str) and (key == kind or key.endswith(f"_{kind}"))
        ]
        counts = [c for c in found if c is not None]
        return sum(counts) if counts else None

    def milliseconds(self, source: object, field: str, name: str) -> float | None:
        value = source.get(field) if isinstance(source, Mapping) else None
        if value is None:
            return None
        if is_number(value) and 0 <= value <= _DAY_MS:
            return float(value)
        self.invalid.append(name)
        return None

    def usage(self, **fields: Any) -> ServerUsage:
        prompt, cached = fields.get("prompt_tokens"), fields.get("cached_tokens")
        if prompt is not None and cached is not None and cached > prompt:
            self.invalid.append("cached_tokens")
            fields["cached_tokens"] = None
        return ServerUsage(**fields, invalid=tuple(dict.fromkeys(self.invalid)))


def usage_of_body(body: object) -> ServerUsage:
    """Reads a raw OpenAI-compatible response body or final stream chunk: ``usage`` (with
    DeepSeek's cache hits), llama.cpp's ``timings`` and vLLM's ``metrics``."""
    fields = body if isinstance(body, Mapping) else {}
    timings = _Timings(fields.get("timings"), fields.get("metrics"))
    return _read_raw(_Reader(), fields.get("usage"), timings)


def usage_of_message(message: object) -> ServerUsage:
    """Reads a LangChain ``AIMessage`` (a whole answer, or a streamed one merged):
    ``usage_metadata`` first, then the raw ``token_usage``, ``timings`` and ``metrics`` kept in
    its ``response_metadata``."""
    read = _Reader()
    metadata = getattr(message, "response_metadata", None)
    metadata = metadata if isinstance(metadata, Mapping) else {}
    raw = metadata.get("token_usage")
    timings = _Timings(metadata.get("timings"), metadata.get("metrics"))
    usage = getattr(message, "usage_metadata", None)
    if not isinstance(usage, Mapping) or not usage:
        return _read_raw(read, raw, timings)
    details = usage.get("input_token_details")
    return read.usage(
        prompt_tokens=read.count(usage, "input_tokens", "prompt_tokens"),
        completion_tokens=read.count(usage, "output_tokens", "completion_tokens"),
        cached_tokens=_cached(read, read.detail(details, "cache_read"), raw, timings.llama),
        cache_creation_tokens=read.detail(details, "cache_creation"),
        **timings.read(read),
    )


class _Timings(NamedTuple):
    """A server's own timing of a call: llama.cpp's ``timings``, vLLM's per-request ``metrics``."""

    llama: object
    vllm: object

    def read(self, read: _Reader) -> dict[str, Any]:
        """The prefill time and tokens and the decode time, llama.cpp's figures first."""
        llama, vllm = self.llama, self.vllm
        prefill_ms = read.milliseconds(llama, "prompt_ms", "prefill_ms")
        decode_ms = read.milliseconds(llama, "predicted_ms", "decode_ms")
        if prefill_ms is None:
            prefill_ms = read.milliseconds(vllm, "time_to_first_token_ms", "prefill_ms")
        prefill_tokens = read.count(llama, "prompt_n", "prefill_tokens")
        if decode_ms is None:
            decode_ms = read.milliseconds(vllm, "generation_time_ms", "decode_ms")
        return {"prefill_ms": prefill_ms, "prefill_tokens": prefill_tokens, "decode_ms": decode_ms}


def _read_raw(read: _Reader, usage: object, timings: _Timings) -> ServerUsage:
    """Reads OpenAI's raw ``usage`` object, with DeepSeek's, llama.cpp's and vLLM's fields."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
    return read.usage(
        prompt_tokens=read.count(usage, "prompt_tokens", "prompt_tokens"),
        completion_tokens=read.count(usage, "completion_tokens", "completion_tokens"),
        cached_tokens=_cached(read, read.detail(details, "cached_tokens"), usage, timings.llama),
        cache_creation_tokens=None,
        **timings.read(read),
    )


def _cached(read: _Reader, reported: int | None, raw: object, timings: object) -> int | None:
    """The cached tokens: as ``usage`` reports them, else DeepSeek's, else llama.cpp's."""
    if reported is not None:
        return reported
    deepseek = read.count(raw, "prompt_cache_hit_tokens", "cached_tokens")
    return deepseek if deepseek is not None else read.count(timings, "cache_n", "cached_tokens")
