"""The probes of ``doctor``: small real requests to the endpoint, and what each observed.

Each probe is bounded by :data:`PROBE_TIMEOUT_S`. The API key is sent, never shown: no reply
or error text carries it. What the server reports about a call (usage, cached tokens, llama.cpp's
prefill timings, impossible counts) is read by
:func:`agent_latency._server_usage.usage_of_body`, the one reader of every provider's shape.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from langchain_core.messages import HumanMessage

from agent_latency._redaction import redact
from agent_latency._server_usage import ServerUsage, usage_of_body
from agent_latency._validation import is_integer
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
PROBE_TIME_SHARE: Final = 0.5
"""A prefill probe is sized to take at most this share of the probe timeout (by the probes
before it), so that a slow server still answers it."""
_MIN_SIZE_STEP: Final = 1.5
TOKENIZER_PROBE_PROMPT: Final = (
    "Reply with one word. A customer in Berlin asks where order A2-7781 is; the carrier scanned "
    "it at the Leipzig hub yesterday at 18:40 and expects delivery on Thursday before noon. "
    "客户来信说，她在十月二日下的订单至今还没有送到。物流记录显示，包裹已于昨天下午六点四十分在莱比锡"
    "转运中心完成扫描，预计星期四中午之前送达柏林。请核对收货地址是否正确，如果地址有误，请在发货前"
    "联系仓库修改，并告诉客户新的预计送达时间。退款政策规定，超过十四天未送达的订单可以全额退款。"
)
"""The tokenizer probe's text: English and Chinese, where vocabularies differ most (cl100k
counts Chinese about 1.5 times as Qwen's vocabulary does)."""
TOKENIZER_PROBE_TOOLS: Final = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    field: {"type": "string", "description": about} for field, about in fields
                },
                "required": [fields[0][0]],
            },
        },
    }
    for name, description, fields in (
        (
            "track_shipment",
            "Returns the carrier's scan history of a shipment, newest first.",
            (("order_id", "The order id, e.g. A2-7781."), ("carrier", "DHL, UPS or DPD.")),
        ),
        (
            "update_address",
            "Changes the delivery address of an order that has not shipped yet.",
            (("order_id", "The order id."), ("address", "The new address, one line.")),
        ),
        (
            "search_policy",
            "Searches the refund and delivery policies; returns the matching paragraphs.",
            (("query", "What to look for, in the customer's words."),),
        ),
    )
)
"""The tokenizer probe's tool definitions: chat templates frame tools each their own way (Qwen's
block of JSON lines, Llama's indented JSON, none at all), so a wrong framing shows here."""

# A server that ignores the limit is cut off after this many chunks, sparing it the long answer.
_MAX_PROBE_CHUNKS: Final = 48
_FILLER = "the quick brown fox jumps over the lazy dog while a small bird sings near the river "


@dataclass(frozen=True)
class HttpReply:
    """What one probe request got back.

    Attributes:
        url: The URL requested.
        status: The HTTP status, or ``None`` when no answer came (see ``error``).
        error: Why no answer came: connection refused, timeout, TLS failure; or, with a 2xx
            status, why the answer is not what was asked for (no chat completion).
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
        usage: What the final chunk reported (usage, llama.cpp's timings); empty when nothing.
    """

    reply: HttpReply
    chunk_ms: tuple[float, ...] = ()
    is_event_stream: bool = True
    text: str = ""
    usage: ServerUsage = field(default_factory=ServerUsage)

    @property
    def completion_tokens(self) -> int | None:
        """``usage.completion_tokens`` of the final chunk, when sent."""
        return self.usage.completion_tokens

    @property
    def ttft_ms(self) -> float | None:
        """When the first content chunk arrived, if one did."""
        return self.chunk_ms[0] if self.chunk_ms else None


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
        usage: Everything the server reported about the call.
    """

    prompt_tokens: int
    ttft_ms: float
    prompt: str = ""
    usage: ServerUsage = field(default_factory=ServerUsage)

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens the server says it took from its prefix cache, if it said."""
        return self.usage.cached_tokens


@dataclass(frozen=True)
class ServerProps:
    """What llama.cpp's server says of itself at ``GET /props``.

    Attributes:
        slots: ``total_slots``: requests served at once, each slot with a prefix cache of its own.
        slot_context: ``default_generation_settings.n_ctx``: the tokens one request may use.
        build: ``build_info``, e.g. ``"b11434-pypi"``.
        renders_tools: Whether its chat template renders tool definitions
            (``chat_template_caps.supports_tools``); ``None`` when not said.
    """

    slots: int
    slot_context: int | None
    build: str
    renders_tools: bool | None


class _RetriesStaleConnection(httpx.BaseTransport):
    """Sends a request once more when the server closed the kept-alive connection it went out
    on before answering (llama-server closes idle and long-used ones: "Server disconnected
    without sending a response" on the next probe). Probes are safe to repeat."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._transport.handle_request(request)
        except httpx.RemoteProtocolError:
            return self._transport.handle_request(request)

    def close(self) -> None:
        self._transport.close()


def _client_default_root() -> str:
    """Where the chat model sends its calls when no base_url is configured: LangChain's
    ``OPENAI_API_BASE``, else the openai SDK's ``OPENAI_BASE_URL``, else OpenAI's API."""
    return next(
        (url for url in map(os.environ.get, _CLIENT_ROOT_VARIABLES) if url), OPENAI_API_ROOT
    )


_CLIENT_ROOT_VARIABLES: Final = ("OPENAI_API_BASE", "OPENAI_BASE_URL")


class Endpoint:
    """Small real requests to the configured OpenAI-compatible endpoint (with no base_url, to
    where the chat model would send its calls, see :func:`_client_default_root`).

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
        self.base_url = (settings.llm.base_url or _client_default_root()).rstrip("/")
        self.limit_field = settings.llm.output_limit_field
        self.timeout_s = min(timeout_s, settings.llm.timeout_seconds)
        key = settings.llm.api_key
        self._secret = key.get_secret_value() if key is not None else None
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=self.timeout_s,
            transport=_RetriesStaleConnection(transport or httpx.HTTPTransport()),
            follow_redirects=True,
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
        usage = ServerUsage()
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
                        usage=usage_of_body(answer),
                    )
                for line in response.iter_lines():
                    event = _sse_data(line)
                    if event is None:
                        continue
                    if "usage" in event or "timings" in event:  # the final chunk's report
                        usage = usage_of_body(event)
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
        """Times one-token blocking answers to prompts of ``sizes`` tokens, smallest first.

        Each prompt starts with a fresh random tag, so no prefix cache can shorten its prefill.
        A slow server (a CPU prefilling 100 tokens a second) would not answer the largest within
        the probe timeout: a size the probes so far predict to take more than
        :data:`PROBE_TIME_SHARE` of it is cut to what fits, and dropped when that adds little
        to the sizes already sent (see :func:`fitting_sizes`).

        Returns:
            One sample per size sent, or the first reply that failed.
        """
        filler_tokens = self._counter.encode(_FILLER * (max(sizes) // 8 + 1))
        samples: list[PrefillSample] = []
        for size in sorted(sizes):
            fits = fitting_size(size, samples, self.timeout_s * 1000 * PROBE_TIME_SHARE)
            if fits is None:
                break
            prompt = f"[{uuid.uuid4().hex}] Reply with one word. " + self._counter.decode(
                filler_tokens[:fits]
            )
            sample = self.time_prompt(prompt)
            if isinstance(sample, HttpReply):
                return sample
            samples.append(sample)
        return samples

    def time_prompt(self, prompt: str) -> PrefillSample | HttpReply:
        """Times a one-token blocking answer to ``prompt``; the failed reply if it fails."""
        started = time.perf_counter()
        reply = self._post_chat(self._body(prompt, 1))
        elapsed_ms = (time.perf_counter() - started) * 1000
        if not reply.ok:
            return reply
        if not _is_completion(reply.body):
            # A web page, another API's body, an error answered 200: its time is no prefill's.
            shown = "a web page" if reply.is_html else "an answer"
            return replace(reply, error=f"{shown}, no chat completion")
        usage = usage_of_body(reply.body)
        prompt_tokens = usage.prompt_tokens
        return PrefillSample(
            prompt_tokens=prompt_tokens
            if prompt_tokens is not None
            else self._counter.count_messages([HumanMessage(prompt)]),
            ttft_ms=elapsed_ms,
            prompt=prompt,
            usage=usage,
        )

    def probe_tokenizer(self) -> TokenizerProbe:
        """Sends :data:`TOKENIZER_PROBE_PROMPT` for one output token, then the same with
        :data:`TOKENIZER_PROBE_TOOLS`: the difference is what the tool definitions cost."""
        prompt = f"[{uuid.uuid4().hex}] {TOKENIZER_PROBE_PROMPT}"
        reply = self._post_chat(self._body(prompt, 1))
        if not reply.ok:
            return TokenizerProbe(reply, prompt)
        tools = TOKENIZER_PROBE_TOOLS
        with_tools = self._post_chat({**self._body(prompt, 1), "tools": list(tools)})
        return TokenizerProbe(
            reply,
            prompt,
            usage_of_body(reply.body),
            tools,
            with_tools,
            usage_of_body(with_tools.body) if with_tools.ok else ServerUsage(),
        )

    def _post_chat(self, body: dict[str, Any]) -> HttpReply:
        url = f"{self.base_url}/chat/completions"
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            return HttpReply(url, None, error=self._describe(exc))
        return _reply(url, response, response.content)

    def get_props(self) -> ServerProps | None:
        """Asks ``GET /props`` at the server's root: llama.cpp's server answers it.

        Returns:
            What it says, or ``None`` when the server does not answer it as llama.cpp does.
        """
        root = self.base_url.removesuffix("/v1")
        url = f"{root}/props"
        try:
            response = self._client.get(url)
        except httpx.HTTPError:
            return None
        body = _reply(url, response, response.content).body
        if response.status_code != 200 or not isinstance(body, dict):
            return None
        return _props(body)

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


@dataclass(frozen=True)
class TokenizerProbe:
    """A known request (English and Chinese text), the same with tool definitions, and the
    server's count of each.

    Attributes:
        reply: The HTTP outcome of the request without tools.
        prompt: The user message sent.
        usage: What the server reported for it.
        tools: The tool definitions of the second request.
        tools_reply: The HTTP outcome of the request with tools (``None``: not sent).
        tools_usage: What the server reported for it.
    """

    reply: HttpReply
    prompt: str
    usage: ServerUsage = field(default_factory=ServerUsage)
    tools: tuple[dict[str, Any], ...] = ()
    tools_reply: HttpReply | None = None
    tools_usage: ServerUsage = field(default_factory=ServerUsage)


def fitting_size(size: int, samples: Sequence[PrefillSample], within_ms: float) -> int | None:
    """The prompt size to probe next: ``size``, or less where the probes so far predict that
    ``size`` tokens take more than ``within_ms``; ``None`` when what fits is not at least
    :data:`_MIN_SIZE_STEP` times the largest size probed (it would add nothing to the fit).

    The prediction is the slowest probe's time per prompt token, fixed costs included: it errs
    toward smaller probes.
    """
    if not samples:
        return size
    ms_per_token = max(s.ttft_ms / max(s.prompt_tokens, 1) for s in samples)
    fits = min(size, int(within_ms / ms_per_token)) if ms_per_token > 0 else size
    largest = max(s.prompt_tokens for s in samples)
    return fits if fits >= largest * _MIN_SIZE_STEP else None


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
    for kind in ("content", "reasoning_content"):
        if isinstance(delta.get(kind), str) and delta[kind]:
            return str(delta[kind])
    if delta.get("tool_calls"):
        return json.dumps(delta["tool_calls"])
    return None


def _is_completion(body: Any) -> bool:
    """Whether a blocking answer's body is a chat completion: an object with choices."""
    choices = body.get("choices") if isinstance(body, dict) else None
    return isinstance(choices, list) and bool(choices)


def _message_text(body: dict[str, Any]) -> str:
    """Returns the content of a blocking answer's first choice."""
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _props(body: dict[str, Any]) -> ServerProps | None:
    """Reads llama.cpp's ``/props`` answer; ``None`` when it has no slot count."""
    slots = body.get("total_slots")
    if not is_integer(slots) or slots < 1:
        return None
    settings = body.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    caps = body.get("chat_template_caps")
    tools = caps.get("supports_tools") if isinstance(caps, dict) else None
    return ServerProps(
        slots=int(slots),
        slot_context=int(n_ctx) if is_integer(n_ctx) and n_ctx > 0 else None,
        build=str(body.get("build_info") or "unknown"),
        renders_tools=tools if isinstance(tools, bool) else None,
    )
