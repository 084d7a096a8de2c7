"""``agent-latency doctor``: checks the configuration and the endpoint, one finding per line.

Every check is a plain function of settings or of a probe's observation, returning a
:class:`CheckResult` (pass, warn or fail, a one-line message, a fix). The probes are small real
requests to the configured endpoint, each bounded by :data:`PROBE_TIMEOUT_S`; :func:`run_checks`
runs them in an order where a failure that makes later probes meaningless (no server, a website
instead of the API, a refused key) stops the endpoint checks. The API key is sent, never shown:
no message carries it, and server error texts are only quoted when they cannot echo it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from langchain_core.messages import HumanMessage

from agent_latency._chat_model import output_limit_param
from agent_latency._config import Settings
from agent_latency._prefill import fit_prefill
from agent_latency._redaction import display_url, redact
from agent_latency._tokens import TokenCounter

PROBE_TIMEOUT_S: Final = 10.0
"""The most any probe waits for the server, whatever ``llm.timeout_seconds`` says."""

OPENAI_API_ROOT: Final = "https://api.openai.com/v1"
LIMIT_PROBE_TOKENS: Final = 2
STREAM_PROBE_TOKENS: Final = 32
MIN_STREAM_CHUNKS: Final = 4
PREFILL_PROBE_TOKENS: Final = (200, 1000, 2000)
RECOMMENDED_TEMPERATURE: Final = (0.1, 0.3)

# A server that ignores the limit is cut off after this many chunks, sparing it the long answer.
_MAX_PROBE_CHUNKS: Final = 48
# A buffered stream is released in one burst, its chunks a few ms apart; decoding the probe's
# 32 tokens takes longer than this on servers up to ~300 tokens/s.
_MIN_STREAM_SPREAD_MS: Final = 100.0
_SERVER_TEXT_CHARS: Final = 200
_FILLER = "the quick brown fox jumps over the lazy dog while a small bird sings near the river "
_KEEP_RULES: Final = (
    ("keep_latest_user", "the latest user message (the question being answered)"),
    ("keep_system", "the system messages (the agent's instructions)"),
)
_TOML_LIMIT_FIX = 'set llm.max_tokens_param = "{field}" in config.toml ([llm] table)'


class CheckStatus(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One finding of ``doctor``.

    Attributes:
        name: What was checked, e.g. ``"streaming"``.
        status: pass, warn or fail.
        message: One line saying what was found.
        fix: What to change when the status is not pass (empty otherwise).
    """

    name: str
    status: CheckStatus
    message: str
    fix: str = ""


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
    """One blocking request's prompt size and its time to the (single) output token."""

    prompt_tokens: int
    ttft_ms: float


# --- checks of the settings alone -----------------------------------------------------------


def check_configuration(settings: Settings) -> list[CheckResult]:
    """Reports where the configuration came from and each of its warnings."""
    origin = ", ".join(settings.sources) or "defaults (no config.toml or settings.json found)"
    results = [CheckResult("configuration", CheckStatus.PASS, f"valid: {origin}")]
    for warning in settings.warnings:
        message, _, fix = warning.partition(" Fix: ")
        results.append(CheckResult("configuration", CheckStatus.WARN, message, fix))
    return results


def check_context_budget(settings: Settings) -> CheckResult:
    """Checks that ``token_budget + reserve_for_output`` fits in the context window."""
    prompt, window = settings.prompt, settings.llm.context_window
    total = prompt.token_budget + prompt.reserve_for_output
    summary = f"token_budget {prompt.token_budget} + reserve_for_output {prompt.reserve_for_output}"
    if window is None:
        return CheckResult(
            "context window",
            CheckStatus.WARN,
            f"the model's context window is unknown, so {summary} = {total} cannot be checked",
            "set llm.context_window in config.toml to the model's limit in tokens",
        )
    if total > window:
        return CheckResult(
            "context window",
            CheckStatus.FAIL,
            f"{summary} = {total} exceeds context_window {window}: no room for the answer",
            f"lower token_budget to at most {window - prompt.reserve_for_output}",
        )
    return CheckResult(
        "context window", CheckStatus.PASS, f"{summary} = {total} fits context_window {window}"
    )


def check_output_room(settings: Settings) -> CheckResult:
    """Checks that a full prompt plus ``max_tokens`` of answer fits the context window.

    With the window unknown, the reserve stands in for it: the answer fits the room the trimmer
    keeps free when ``max_tokens <= reserve_for_output``.
    """
    budget = settings.prompt.token_budget
    reserve = settings.prompt.reserve_for_output
    max_tokens = settings.streaming.max_tokens
    window = settings.llm.context_window
    if window is None:
        if max_tokens <= reserve:
            return CheckResult(
                "max tokens",
                CheckStatus.PASS,
                f"max_tokens {max_tokens} fits reserve_for_output {reserve}",
            )
        return CheckResult(
            "max tokens",
            CheckStatus.WARN,
            f"max_tokens {max_tokens} exceeds reserve_for_output {reserve}: a full prompt may "
            "leave too little room for the answer, and the window is unknown",
            f"set streaming.maxTokens to at most {reserve}, or set llm.context_window",
        )
    if budget + max_tokens > window:
        return CheckResult(
            "max tokens",
            CheckStatus.FAIL,
            f"token_budget {budget} + max_tokens {max_tokens} = {budget + max_tokens} exceeds "
            f"context_window {window}: a full prompt leaves no room for the answer (the server "
            "rejects the request or truncates the reply)",
            f"set streaming.maxTokens to at most {window - budget}, or lower token_budget",
        )
    return CheckResult(
        "max tokens",
        CheckStatus.PASS,
        f"token_budget {budget} + max_tokens {max_tokens} = {budget + max_tokens} fits "
        f"context_window {window}",
    )


def check_keep_rules(settings: Settings) -> CheckResult:
    """Checks that trimming can never drop the system messages or the latest user message."""
    dropped = [(key, what) for key, what in _KEEP_RULES if not getattr(settings.prompt, key)]
    if not dropped:
        return CheckResult(
            "keep rules",
            CheckStatus.PASS,
            "trimming never drops the system messages or the latest user message",
        )
    keys = " and ".join(f"llm.prompt.{key} = true" for key, _ in dropped)
    return CheckResult(
        "keep rules",
        CheckStatus.WARN,
        f"trimming may drop {' and '.join(what for _, what in dropped)}: "
        "answers go off-topic when it does",
        f"set {keys} in config.toml",
    )


def check_temperature(settings: Settings) -> CheckResult:
    """Checks that the temperature keeps streamed agent answers short and stable."""
    temperature = settings.streaming.temperature
    low, high = RECOMMENDED_TEMPERATURE
    if low <= temperature <= high:
        return CheckResult("temperature", CheckStatus.PASS, f"{temperature} is within {low}-{high}")
    effect = (
        "outputs grow longer and vary more, and so does the total time"
        if temperature > high
        else "greedy decoding can repeat itself in loops on some models"
    )
    return CheckResult(
        "temperature",
        CheckStatus.WARN,
        f"{temperature} is outside the recommended {low}-{high} for streamed agents: {effect}",
        f"set streaming.temperature in settings.json to {low}-{high}",
    )


# --- checks of the endpoint's answers -------------------------------------------------------


def check_api_root(models: HttpReply, *, api_root: str | None = None) -> CheckResult:
    """Checks that ``GET {base_url}/models`` reached an API root.

    Args:
        models: The answer to ``GET {base_url}/models``.
        api_root: A URL found to answer as the API root, to suggest when base_url is not one.
    """
    if models.status is None:
        return CheckResult(
            "api root",
            CheckStatus.FAIL,
            f"cannot reach {display_url(models.url)}: {models.error}",
            "start the server, or correct llm.base_url (scheme, host, port); "
            "`agent-latency sim` serves http://127.0.0.1:8000/v1",
        )
    if models.status == 404 or models.is_html:
        answer = "an HTML page" if models.is_html else "404 Not Found"
        return CheckResult(
            "api root",
            CheckStatus.FAIL,
            f"GET {display_url(models.url)} answered {answer}: "
            "base_url points at the website, not the API root",
            f"set llm.base_url to {display_url(api_root)}"
            if api_root
            else "use the API root from the provider's docs, usually ending in /v1 "
            "(e.g. https://host/v1)",
        )
    if models.ok or models.status in (401, 403):
        return CheckResult(
            "api root",
            CheckStatus.PASS,
            f"GET {display_url(models.url)} answered {models.status} with an API answer",
        )
    return _http_failure("api root", models)


def check_api_key(models: HttpReply, *, key_configured: bool) -> CheckResult:
    """Checks that the server accepted the key (or needs none), from an API answer."""
    if models.status == 401:
        found = (
            "the server refused the key (401 Unauthorized)"
            if key_configured
            else "the server wants an API key and none is configured (401 Unauthorized)"
        )
        return CheckResult(
            "api key",
            CheckStatus.FAIL,
            found,
            "set llm.api_key in config.toml or AGENT_LATENCY_API_KEY to a key issued for this "
            "base_url (one provider's keys do not work on another's URL)",
        )
    if models.status == 403:
        return CheckResult(
            "api key",
            CheckStatus.FAIL,
            "the server knows the key but refuses this request (403 Forbidden)",
            "check the key's project and permissions for this model, or use another key",
        )
    if models.ok:
        found = "accepted" if key_configured else "not needed by this server"
        return CheckResult("api key", CheckStatus.PASS, f"the key is {found}")
    return _http_failure("api key", models)


def check_model(models: HttpReply, model: str) -> CheckResult:
    """Checks that the configured model is among those the server lists."""
    listed = _listed_models(models.body)
    if model in listed:
        return CheckResult("model", CheckStatus.PASS, f"{model!r} is served")
    if not listed:
        return CheckResult(
            "model",
            CheckStatus.WARN,
            f"the server lists no models, so {model!r} cannot be checked",
            "make sure llm.model names a model this server runs",
        )
    shown = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "")
    return CheckResult(
        "model",
        CheckStatus.WARN,
        f"{model!r} is not among the {len(listed)} models listed ({shown})",
        "set llm.model (or AGENT_LATENCY_MODEL) to one of them",
    )


def check_output_limit(probe: LimitProbe) -> CheckResult:
    """Checks that the server stops at the output limit it is sent."""
    if not probe.stream.reply.ok:
        return _http_failure("output limit", probe.stream.reply, limit_field=probe.field)
    got = (
        f"still generating after {probe.received} (stopped reading)"
        if probe.cut_off
        else f"got {probe.received}"
    )
    found = f"asked for {probe.requested} tokens via {probe.field}, {got}"
    if probe.received <= probe.requested and not probe.cut_off:
        return CheckResult("output limit", CheckStatus.PASS, found)
    other = _other_limit_field(probe.field)
    return CheckResult(
        "output limit",
        CheckStatus.FAIL,
        f"{found}: the server ignores {probe.field}; such a server generates until its "
        "context is full and blocks for minutes",
        _TOML_LIMIT_FIX.format(field=other),
    )


def check_streaming(probe: StreamProbe, *, enabled: bool = True) -> CheckResult:
    """Checks that a streamed answer's first chunk arrives well before its last.

    Streaming passes when at least :data:`MIN_STREAM_CHUNKS` content chunks arrive and the first
    comes within half the time to the last, or the chunks spread over at least
    :data:`_MIN_STREAM_SPREAD_MS` (a slow prefill followed by fast decoding). A buffered stream
    arrives in one burst.
    """
    if not probe.reply.ok:
        return _http_failure("streaming", probe.reply)
    fix = (
        "disable response buffering between client and server: nginx `proxy_buffering off;` "
        "(or the upstream header `X-Accel-Buffering: no`), no buffering middleware, and a client "
        "that reads the stream as it arrives"
    )
    if not probe.is_event_stream:
        return CheckResult(
            "streaming",
            CheckStatus.FAIL,
            "a request with stream=true got one JSON body: the server or a proxy does not stream",
            fix,
        )
    count = len(probe.chunk_ms)
    if count < MIN_STREAM_CHUNKS:
        return CheckResult(
            "streaming",
            CheckStatus.WARN,
            f"only {count} content chunks arrived, too few to tell streaming from buffering",
            "run doctor again; if it persists, the server sends large chunks or short answers",
        )
    first, last = probe.chunk_ms[0], probe.chunk_ms[-1]
    timing = f"first of {count} chunks after {first:.0f} ms, last after {last:.0f} ms"
    if first > 0.5 * last and last - first < _MIN_STREAM_SPREAD_MS:
        return CheckResult(
            "streaming",
            CheckStatus.FAIL,
            f"{timing}: the client or a proxy buffers the stream, so the first token "
            "arrives with the last",
            fix,
        )
    if not enabled:
        return CheckResult(
            "streaming",
            CheckStatus.WARN,
            f"the endpoint streams ({timing}), but streaming is off in the settings",
            "set llm.streaming.enabled = true (or streaming.enabled in settings.json)",
        )
    return CheckResult("streaming", CheckStatus.PASS, timing)


def check_prefill(samples: Sequence[PrefillSample], settings: Settings) -> CheckResult:
    """Estimates the prefill cost and the budget that keeps TTFT under ``ttft_warn_ms``."""
    fit = fit_prefill((sample.prompt_tokens, sample.ttft_ms) for sample in samples)
    if fit is None:
        return CheckResult(
            "prefill",
            CheckStatus.WARN,
            "the probes did not give two distinct prompt sizes; prefill cost not measured",
            "run doctor again; check that the server reports usage.prompt_tokens",
        )
    warn_ms = settings.metrics.ttft_warn_ms
    budget = settings.prompt.token_budget
    limit = fit.budget_under(warn_ms)
    if limit is None:
        return CheckResult(
            "prefill",
            CheckStatus.PASS,
            f"TTFT did not grow with prompt size (about {fit.intercept_ms:.0f} ms): prefill is too "
            f"fast to limit token_budget {budget}",
        )
    cost = f"≈ {fit.ms_per_1k_tokens:.0f} ms per 1k prompt tokens + {fit.intercept_ms:.0f} ms fixed"
    if limit == 0:
        return CheckResult(
            "prefill",
            CheckStatus.WARN,
            f"{cost}: even a short prompt misses first_token_warn_ms {warn_ms} ms",
            "use a faster or less loaded server, or raise first_token_warn_ms",
        )
    found = f"{cost}; TTFT stays under {warn_ms} ms up to ≈ {limit:,} prompt tokens"
    if limit >= budget:
        return CheckResult("prefill", CheckStatus.PASS, f"{found} (token_budget {budget:,})")
    return CheckResult(
        "prefill",
        CheckStatus.WARN,
        f"{found}, below token_budget {budget:,}: full prompts will exceed first_token_warn_ms",
        f"lower token_budget to about {limit - limit % 100 or limit}, or accept a higher "
        "first_token_warn_ms",
    )


# --- the probes -----------------------------------------------------------------------------


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
        self.limit_field = output_limit_param(settings)
        self.timeout_s = min(timeout_s, settings.llm.timeout_seconds)
        key = settings.llm.api_key
        self._secret = key.get_secret_value() if key is not None else None
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        self._client = httpx.Client(
            headers=headers, timeout=self.timeout_s, transport=transport, follow_redirects=True
        )
        self._counter = TokenCounter()

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
        """Streams one answer, recording when each content chunk arrives.

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
                        completion_tokens=_completion_tokens(answer),
                    )
                for line in response.iter_lines():
                    event = _sse_data(line)
                    if event is None:
                        continue
                    if (reported := _completion_tokens(event)) is not None:
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
        return self.stream("Count from 1 to 100, separated by spaces.", limit=STREAM_PROBE_TOKENS)

    def probe_prefill(
        self, sizes: Sequence[int] = PREFILL_PROBE_TOKENS
    ) -> list[PrefillSample] | HttpReply:
        """Times one-token blocking answers to prompts of ``sizes`` tokens.

        Each prompt starts with a fresh random tag, so no prefix cache can shorten its prefill.

        Returns:
            One sample per size, or the first reply that failed.
        """
        url = f"{self.base_url}/chat/completions"
        filler_tokens = self._counter.encode(_FILLER * (max(sizes) // 8 + 1))
        samples: list[PrefillSample] = []
        for size in sizes:
            prompt = f"[{uuid.uuid4().hex}] Reply with one word. " + self._counter.decode(
                filler_tokens[:size]
            )
            started = time.perf_counter()
            try:
                response = self._client.post(url, json=self._body(prompt, 1))
            except httpx.HTTPError as exc:
                return HttpReply(url, None, error=self._describe(exc))
            elapsed_ms = (time.perf_counter() - started) * 1000
            reply = _reply(url, response, response.content)
            if not reply.ok:
                return reply
            usage = reply.body.get("usage") if isinstance(reply.body, dict) else None
            prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            if not isinstance(prompt_tokens, int):
                prompt_tokens = self._counter.count_messages([HumanMessage(prompt)])
            samples.append(PrefillSample(prompt_tokens, elapsed_ms))
        return samples

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


def run_checks(settings: Settings, *, endpoint: Endpoint | None = None) -> Iterator[CheckResult]:
    """Runs every check, yielding each result as soon as it is known.

    The endpoint checks stop after a failure that makes the later probes meaningless; the
    prefill probes are skipped when the server ignores the output limit (each would block).

    Args:
        settings: The loaded settings.
        endpoint: The probe client; by default one for ``settings`` (closed at the end).
    """
    yield from check_configuration(settings)
    yield check_context_budget(settings)
    yield check_output_room(settings)
    yield check_keep_rules(settings)
    yield check_temperature(settings)
    owned = endpoint is None
    probes = endpoint or Endpoint(settings)
    try:
        yield from _endpoint_checks(probes, settings)
    finally:
        if owned:
            probes.close()


def _endpoint_checks(endpoint: Endpoint, settings: Settings) -> Iterator[CheckResult]:
    models = endpoint.get_models()
    api_root = None
    if models.status == 404 or models.is_html:
        api_root = endpoint.find_api_root()
    root = check_api_root(models, api_root=api_root)
    yield root
    if root.status is CheckStatus.FAIL:
        return
    key = check_api_key(models, key_configured=settings.llm.api_key is not None)
    yield key
    if key.status is CheckStatus.FAIL:
        return
    yield check_model(models, settings.llm.model)
    limit_probe = endpoint.probe_limit()
    limit = check_output_limit(limit_probe)
    yield limit
    if not limit_probe.stream.reply.ok:
        return  # the request itself failed; the other probes would fail alike
    streaming = endpoint.probe_streaming()
    yield check_streaming(streaming, enabled=settings.streaming.enabled)
    if not streaming.reply.ok or limit.status is CheckStatus.FAIL:
        return  # a server ignoring the limit would answer each prefill probe at full length
    samples = endpoint.probe_prefill()
    if isinstance(samples, HttpReply):
        yield _http_failure("prefill", samples)
    else:
        yield check_prefill(samples, settings)


# --- helpers --------------------------------------------------------------------------------


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


def _completion_tokens(event: dict[str, Any]) -> int | None:
    usage = event.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None


def _listed_models(body: Any) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return []
    return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]


def _other_limit_field(field: str) -> str:
    return "max_completion_tokens" if field == "max_tokens" else "max_tokens"


def _server_message(reply: HttpReply) -> str:
    """Returns the server's error message, shortened; auth errors are never quoted (they may
    echo part of the key)."""
    if reply.status in (401, 403) or not isinstance(reply.body, dict):
        return ""
    error = reply.body.get("error")
    message = error.get("message") if isinstance(error, dict) else reply.body.get("detail")
    return " ".join(str(message).split())[:_SERVER_TEXT_CHARS] if message else ""


def _http_failure(name: str, reply: HttpReply, *, limit_field: str | None = None) -> CheckResult:
    """Explains a probe request that got no answer or an error status."""
    if reply.status is None:
        return CheckResult(
            name,
            CheckStatus.FAIL,
            f"{display_url(reply.url)}: {reply.error}",
            "check that the server is up and not overloaded; llm.base_url must be reachable",
        )
    if reply.status in (401, 403):
        return replace(check_api_key(reply, key_configured=True), name=name)
    said = _server_message(reply)
    found = f"{display_url(reply.url)} answered {reply.status}" + (f": {said}" if said else "")
    if reply.status == 404:
        fix = "set llm.model to a model the server runs (see the model check above)"
    elif reply.status in (400, 422) and limit_field is not None and limit_field in said:
        fix = _TOML_LIMIT_FIX.format(field=_other_limit_field(limit_field))
    elif reply.status in (400, 422):
        fix = "the server refused the request; see its message and the server's docs"
    elif reply.status == 429:
        fix = "the server is rate-limiting; wait and run doctor again, or raise the limit"
    else:
        fix = "the server failed; see its logs"
    return CheckResult(name, CheckStatus.FAIL, found, fix)
