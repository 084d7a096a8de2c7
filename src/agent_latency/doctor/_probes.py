"""The probes of ``doctor``: small real requests to the endpoint, and what each observed.

Each probe is bounded by :data:`PROBE_TIMEOUT_S`. The API key is sent, never shown: no reply
or error text carries it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from langchain_core.messages import HumanMessage

from agent_latency._redaction import redact
from agent_latency.config import Settings
from agent_latency.tokens import TokenCounter

PROBE_TIMEOUT_S: Final = 10.0
"""The most any probe waits for the server, whatever ``llm.timeout_seconds`` says."""

OPENAI_API_ROOT: Final = "https://api.openai.com/v1"
LIMIT_PROBE_TOKENS: Final = 2
STREAM_PROBE_TOKENS: Final = 32
STREAM_PROBE_PROMPT: Final = "Count from 1 to 30, separated by spaces. Write only the numbers."
"""A prompt that any chat model answers at length, so the stream has chunks to time."""
PREFILL_PROBE_TOKENS: Final = (200, 1000, 2000)

# A server that ignores the limit is cut off after this many chunks, sparing it the long answer.
_MAX_PROBE_CHUNKS: Final = 48
_FILLER = "the quick brown fox jumps over the lazy dog while a small bird sings near the river "


@dataclass(frozen=True)
class HttpReply:
    """What one probe request got back.

    Attributes:
        url: The URL requested.
        status: The HTTP status, or ``None`` when no answer came (see ``error``).
        error: Why no answer came: connection refused, timeout, TLS failure.
        is_html: The body is a web page rather than an API answer.
        body: The decoded JSON body (of a non-streamed answer or an error), else ``None``.
    """

    url: str
    status: int | None
    error: str | None = None
    is_html: bool = False
    body: Any = None

    @property
    def ok(self) -> bool:
        """The request got a 2xx answer."""
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class StreamProbe:
    """The arrival times of a streamed answer's content chunks.

    Attributes:
        reply: The HTTP outcome.
        chunk_ms: When each content chunk arrived, in ms after the request was sent.
        is_event_stream: The answer came as server-sent events (not one JSON body).
        text: The content received.
        completion_tokens: ``usage.completion_tokens`` of the final chunk, when sent.
    """

    reply: HttpReply
    chunk_ms: tuple[float, ...] = ()
    is_event_stream: bool = True
    text: str = ""
    completion_tokens: int | None = None


@dataclass(frozen=True)
class LimitProbe:
    """A request for a few output tokens and how many came back.

    Attributes:
        stream: The streamed answer.
        requested: The output limit sent.
        field: The request field that carried it.
        received: ``usage.completion_tokens`` when reported, else the content's token count.
        cut_off: The answer was still running when the probe stopped reading.
    """

    stream: StreamProbe
    requested: int
    field: str
    received: int
    cut_off: bool = False


@dataclass(frozen=True)
class PrefillSample:
    """One blocking request's prompt size and its time to the (single) output token.

    Attributes:
        prompt_tokens: The server's ``usage.prompt_tokens``, else the local cl100k estimate.
        ttft_ms: Time to the answer (one token, so the first token's time).
        prompt: The prompt sent, as one user message.
        reported: The server reported ``usage.prompt_tokens``.
        cached_tokens: Prompt tokens the server says it took from its prefix cache, if it said.
    """

    prompt_tokens: int
    ttft_ms: float
    prompt: str = ""
    reported: bool = True
    cached_tokens: int | None = None


class Endpoint:
    """Small real requests to the configured OpenAI-compatible endpoint.

    Args:
        settings: The channel to probe (base_url, key, model, output-limit field).
        timeout_s: The most each request waits; ``llm.timeout_seconds`` when smaller.
        transport: An httpx transport to use instead of the network (tests).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        timeout_s: float = PROBE_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"Endpoint: timeout_s must be > 0, got {timeout_s!r}.")
        self.settings = settings
        self.base_url = (settings.llm.base_url or OPENAI_API_ROOT).rstrip("/")
        self.limit_field = settings.llm.output_limit_field
        self.timeout_s = min(timeout_s, settings.llm.timeout_seconds)
        key = settings.llm.api_key
        self._secret = key.get_secret_value() if key is not None else None
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        self._client = httpx.Client(
            headers=headers, timeout=self.timeout_s, transport=transport, follow_redirects=True
        )
        self._counter = TokenCounter()  # builds prompts of a known size; any tokenizer would do

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._client.close()

    def get_models(self, base_url: str | None = None) -> HttpReply:
        """Sends ``GET {base_url}/models``."""
        url = f"{(base_url or self.base_url).rstrip('/')}/models"
        try:
            response = self._client.get(url)
        except httpx.HTTPError as exc:
            return HttpReply(url, None, error=self._describe(exc))
        return _reply(url, response, response.content)

    def find_api_root(self) -> str | None:
        """Returns a URL near base_url that answers as an API root (``…/v1``), if any."""
        parts = urlsplit(self.base_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        for candidate in dict.fromkeys((f"{self.base_url}/v1", f"{origin}/v1")):
            if candidate == self.base_url:
                continue
            reply = self.get_models(candidate)
            if (reply.ok or reply.status in (401, 403)) and not reply.is_html:
                return candidate
        return None

    def stream(self, prompt: str, *, limit: int) -> StreamProbe:
        """Streams one answer, asking for usage at the end, and records when each chunk arrives.

        Reading stops after :data:`_MAX_PROBE_CHUNKS` chunks, so a server that ignores the limit
        is not waited for.
        """
        url = f"{self.base_url}/chat/completions"
        body = self._body(prompt, limit)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        chunk_ms: list[float] = []
        parts: list[str] = []
        usage: int | None = None
        started = time.perf_counter()
        try:
            with self._client.stream("POST", url, json=body) as response:
                if response.status_code != 200 or not _is_event_stream(response):
                    # An error, or one JSON body from a server that ignored stream=true.
                    reply = _reply(url, response, response.read())
                    answer = reply.body if isinstance(reply.body, dict) else {}
                    return StreamProbe(
                        reply,
                        is_event_stream=False,
                        text=_message_text(answer),
                        completion_tokens=_usage_count(answer, "completion_tokens"),
                    )
                for line in response.iter_lines():
                    event = _sse_data(line)
                    if event is None:
                        continue
                    if (reported := _usage_count(event, "completion_tokens")) is not None:
                        usage = reported
                    text = _delta_text(event)
                    if text is not None:
                        chunk_ms.append((time.perf_counter() - started) * 1000)
                        parts.append(text)
                        if len(chunk_ms) >= _MAX_PROBE_CHUNKS:
                            break
                reply = HttpReply(url, response.status_code)
        except httpx.HTTPError as exc:
            return StreamProbe(HttpReply(url, None, error=self._describe(exc)))
        return StreamProbe(reply, tuple(chunk_ms), True, "".join(parts), usage)

    def probe_limit(self, limit: int = LIMIT_PROBE_TOKENS) -> LimitProbe:
        """Asks for ``limit`` output tokens in the channel's limit field and counts the answer."""
        probe = self.stream("Write a long story about the sea.", limit=limit)
        cut_off = len(probe.chunk_ms) >= _MAX_PROBE_CHUNKS
        received = probe.completion_tokens
        if received is None or cut_off:
            received = self._counter.count_text(probe.text)
        return LimitProbe(probe, limit, self.limit_field, received, cut_off)

    def probe_streaming(self) -> StreamProbe:
        """Streams an answer long enough to see whether chunks arrive one by one."""
        return self.stream(STREAM_PROBE_PROMPT, limit=STREAM_PROBE_TOKENS)

    def probe_prefill(
        self, sizes: Sequence[int] = PREFILL_PROBE_TOKENS
    ) -> list[PrefillSample] | HttpReply:
        """Times one-token blocking answers to prompts of ``sizes`` tokens.

        Each prompt starts with a fresh random tag, so no prefix cache can shorten its prefill.

        Returns:
            One sample per size, or the first reply that failed.
        """
        filler_tokens = self._counter.encode(_FILLER * (max(sizes) // 8 + 1))
        samples: list[PrefillSample] = []
        for size in sizes:
            prompt = f"[{uuid.uuid4().hex}] Reply with one word. " + self._counter.decode(
                filler_tokens[:size]
            )
            sample = self.time_prompt(prompt)
            if isinstance(sample, HttpReply):
                return sample
            samples.append(sample)
        return samples

    def time_prompt(self, prompt: str) -> PrefillSample | HttpReply:
        """Times a one-token blocking answer to ``prompt``; the failed reply if it fails."""
        url = f"{self.base_url}/chat/completions"
        started = time.perf_counter()
        try:
            response = self._client.post(url, json=self._body(prompt, 1))
        except httpx.HTTPError as exc:
            return HttpReply(url, None, error=self._describe(exc))
        elapsed_ms = (time.perf_counter() - started) * 1000
        reply = _reply(url, response, response.content)
        if not reply.ok:
            return reply
        answer = reply.body if isinstance(reply.body, dict) else {}
        prompt_tokens = _usage_count(answer, "prompt_tokens")
        return PrefillSample(
            prompt_tokens=prompt_tokens
            if prompt_tokens is not None
            else self._counter.count_messages([HumanMessage(prompt)]),
            ttft_ms=elapsed_ms,
            prompt=prompt,
            reported=prompt_tokens is not None,
            cached_tokens=_cached_tokens(answer),
        )

    def _body(self, prompt: str, limit: int) -> dict[str, Any]:
        return {
            "model": self.settings.llm.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.settings.streaming.temperature,
            self.limit_field: limit,
        }

    def _describe(self, exc: httpx.HTTPError) -> str:
        if isinstance(exc, httpx.TimeoutException):
            return f"no answer within {self.timeout_s:g} s"
        if isinstance(exc, httpx.ConnectError):
            return f"connection failed ({redact(str(exc), self._secret) or 'refused'})"
        return f"{type(exc).__name__}: {redact(str(exc), self._secret)}"


def listed_models(body: Any) -> list[str]:
    """Returns the model ids of a ``GET /models`` answer."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return []
    return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]


def _reply(url: str, response: httpx.Response, content: bytes) -> HttpReply:
    content_type = response.headers.get("content-type", "")
    is_html = "html" in content_type or content.lstrip()[:1] == b"<"
    try:
        body = None if is_html else json.loads(content)
    except ValueError:
        body = None
    return HttpReply(url, response.status_code, is_html=is_html, body=body)


def _is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def _sse_data(line: str) -> dict[str, Any] | None:
    if not line.startswith("data:"):
        return None
    payload = line[len("data:") :].strip()
    if payload == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _delta_text(event: dict[str, Any]) -> str | None:
    """Returns the content a chunk carries (text, reasoning or tool-call arguments), if any."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    if not isinstance(delta, dict):
        return None
    for field in ("content", "reasoning_content"):
        if isinstance(delta.get(field), str) and delta[field]:
            return str(delta[field])
    if delta.get("tool_calls"):
        return json.dumps(delta["tool_calls"])
    return None


def _message_text(body: dict[str, Any]) -> str:
    """Returns the content of a blocking answer's first choice."""
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _usage_count(body: dict[str, Any], field: str) -> int | None:
    usage = body.get("usage")
    tokens = usage.get(field) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def _cached_tokens(body: dict[str, Any]) -> int | None:
    """The cached prompt tokens: OpenAI's ``prompt_tokens_details.cached_tokens``, DeepSeek's
    ``prompt_cache_hit_tokens``; ``None`` when the server says nothing."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    for source, field in ((details, "cached_tokens"), (usage, "prompt_cache_hit_tokens")):
        value = source.get(field) if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
