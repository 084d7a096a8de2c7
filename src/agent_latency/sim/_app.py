"""The simulator's HTTP face: routes, the latency schedule, injected faults and statistics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Send

from ._answer import Answer, compose_answer
from ._cache import prefix_cache_for
from ._config import SimulatorConfig
from ._guards import (
    ClientGone,
    authenticate,
    check_context_window,
    check_model,
    inject_fault,
    read_json,
)
from ._prompt import PromptTokenizer, token_count
from ._protocol import ChatRequest, RequestError, parse_chat_request
from ._waiting import UNSENT, Sleeper, Stopping, unless_disconnected

_SYSTEM_FINGERPRINT = "fp_agent_latency_sim"
_OWNER = "agent-latency-sim"
_KEPT_HEADERS = 1024
"""How many chat requests' headers :meth:`Simulator.request_headers` keeps (the latest)."""
_SECRET_HEADERS = frozenset({"authorization", "api-key", "cookie", "proxy-authorization"})


@dataclass(frozen=True)
class SimulatorStats:
    """What a simulator has served so far.

    Attributes:
        requests: Chat completions whose prefill finished.
        prompt_tokens: Prompt tokens of those requests.
        cached_tokens: Prompt tokens the prefix cache spared from prefill.
        completion_tokens: Output tokens of those requests.
        errors: Chat requests answered with an error status (refused or injected faults).
    """

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0


class _StatsCounter:
    """Counts in the server's thread; read from any other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {name: 0 for name in SimulatorStats.__dataclass_fields__}

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, count in counts.items():
                self._counts[name] += count

    def snapshot(self) -> SimulatorStats:
        with self._lock:
            return SimulatorStats(**self._counts)


@dataclass(frozen=True)
class _ScheduledAnswer:
    """A scheduled answer: one accepted chat request and when each part of its answer is due."""

    completion_id: str
    created: int
    request: ChatRequest
    prompt: bytes
    cached_tokens: int
    answer: Answer
    prefill_ms: float  # the latency model's prefill of the uncached tokens, without the overhead
    first_token_at: float  # event-loop time
    last_token_at: float  # event-loop time

    @property
    def prompt_tokens(self) -> int:
        return token_count(self.prompt)

    def timings(self) -> dict[str, Any]:
        """Returns llama.cpp's ``timings`` object: the prefill of the uncached tokens, the decode.

        ``prompt_n`` are the prompt tokens prefilled, ``cache_n`` those the cache spared
        (together ``usage.prompt_tokens``); ``predicted_ms`` runs from the first output token to
        the last, as llama.cpp's does, so ``predicted_n`` counts the first token too.
        """
        prompt_n = self.prompt_tokens - self.cached_tokens
        predicted_n = self.answer.completion_tokens
        predicted_ms = (self.last_token_at - self.first_token_at) * 1000
        return {
            "cache_n": self.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": self.prefill_ms,
            **_rates("prompt", prompt_n, self.prefill_ms),
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            **_rates("predicted", predicted_n, predicted_ms),
        }

    def usage(self) -> dict[str, Any]:
        completion = self.answer.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }


def _rates(part: str, tokens: int, ms: float) -> dict[str, float | None]:
    """Returns llama.cpp's per-token and per-second rates; ``None`` (its JSON null) where a
    division by zero makes them infinite."""
    return {
        f"{part}_per_token_ms": ms / tokens if tokens else None,
        f"{part}_per_second": tokens * 1000 / ms if ms > 0 else None,
    }


class _ConnectionDropped(Exception):
    """Raised inside a stream to simulate a connection reset."""


class _DroppableStreamingResponse(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        # Returning without the final body message makes the ASGI server close the connection.
        with contextlib.suppress(_ConnectionDropped):
            await super().stream_response(send)


def _sse(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


SHUTTING_DOWN = RequestError(
    503, "The server is shutting down; try again.", error_type="server_error"
)
"""The answer to a request the server stops serving."""


async def _ended_by_an_error_event_on_stop(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Passes a stream on; when the server stops, ends it with an error event, as OpenAI does."""
    try:
        async for event in events:
            yield event
    except Stopping:
        yield _sse(SHUTTING_DOWN.body())


class Simulator:
    """One simulated model server: its state and the Starlette app that serves it.

    Args:
        config: How the server behaves.
    """

    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self._tokenizer = PromptTokenizer.for_config(config)
        self._prefix_cache = prefix_cache_for(config)
        self._random = random.Random(config.seed)
        self._stats = _StatsCounter()
        self._headers: deque[dict[str, str]] = deque(maxlen=_KEPT_HEADERS)
        self.sleeper = Sleeper()
        """Every wait of a request; the server stops it when it stops serving."""
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
                Route("/v1/models/{model:path}", self._retrieve_model, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                # What llama-server says of itself; only a server with slots is one.
                *(
                    [Route("/props", self._props, methods=["GET"])]
                    if config.cache_slots is not None
                    else []
                ),
            ],
            exception_handlers={
                RequestError: self._request_error,
                HTTPException: self._http_error,
                Exception: self._server_error,
            },
        )

    def stats(self) -> SimulatorStats:
        """Returns the counts so far; safe to call from any thread."""
        return self._stats.snapshot()

    def request_headers(self) -> list[dict[str, str]]:
        """The headers of the latest chat requests (up to 1,024), oldest first, names in lower
        case, credentials left out (what a router in front of the server would route by)."""
        return list(self._headers)

    async def _chat_completions(self, request: Request) -> Response:
        arrival = asyncio.get_running_loop().time()
        self._headers.append({k: v for k, v in request.headers.items() if k not in _SECRET_HEADERS})
        try:
            scheduled = await self._accept(request, arrival)
        except RequestError as error:
            self._stats.add(errors=1)
            return error.response()
        except ClientGone:
            return UNSENT
        if scheduled.request.stream:  # Starlette stops a stream whose client is gone
            events = _ended_by_an_error_event_on_stop(self._sse_events(scheduled))
            return _DroppableStreamingResponse(
                self._held_until_end(events) if self.config.buffered else events,
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        try:
            return await unless_disconnected(request, self._blocking_answer(scheduled))
        except Stopping:
            return SHUTTING_DOWN.response()

    async def _blocking_answer(self, scheduled: _ScheduledAnswer) -> Response:
        await self._prefill(scheduled)
        await self.sleeper.until(scheduled.last_token_at)
        return JSONResponse(
            {
                **self._envelope(scheduled, "chat.completion"),
                "choices": [
                    {
                        "index": 0,
                        "message": scheduled.answer.message(),
                        "logprobs": None,
                        "finish_reason": scheduled.answer.finish_reason,
                    }
                ],
                "usage": self._usage(scheduled),
                **self._timings(scheduled),  # llama.cpp's, beside usage
            }
        )

    async def _accept(self, request: Request, arrival: float) -> _ScheduledAnswer:
        """Checks the request and schedules its answer; raises RequestError to refuse it."""
        authenticate(request, self.config.api_key)
        chat = parse_chat_request(await read_json(request, self.config.max_body_bytes))
        check_model(chat.model, self.config.models)
        inject_fault(self.config, self._random)
        prompt = self._tokenizer.tokens(chat)
        prompt_tokens = token_count(prompt)
        reserved = chat.max_tokens if self.config.window_holds_max_tokens else None
        check_context_window(prompt_tokens, reserved, self.config.context_window)
        cached = self._prefix_cache.reusable_tokens(prompt) if self._caches(chat) else 0
        uncached = prompt_tokens - cached
        first_token_at = arrival + self.config.ttft_ms(uncached, prompt_tokens) / 1000
        answer = compose_answer(chat, prompt, answer_tokens=self.config.answer_tokens)
        return _ScheduledAnswer(
            completion_id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            request=chat,
            prompt=prompt,
            cached_tokens=cached,
            answer=answer,
            prefill_ms=self.config.prefill_ms(uncached, prompt_tokens),
            first_token_at=first_token_at,
            last_token_at=self._output_time(first_token_at, answer.completion_tokens - 1),
        )

    def _caches(self, chat: ChatRequest) -> bool:
        return self.config.prefix_cache and chat.cache_prompt

    async def _prefill(self, scheduled: _ScheduledAnswer) -> None:
        """Waits out the prefill, then keeps the prompt for later requests to reuse."""
        await self.sleeper.until(scheduled.first_token_at)
        if self._caches(scheduled.request):
            self._prefix_cache.remember(scheduled.prompt)
        self._stats.add(
            requests=1,
            prompt_tokens=scheduled.prompt_tokens,
            cached_tokens=scheduled.cached_tokens,
            completion_tokens=scheduled.answer.completion_tokens,
        )

    def _output_time(self, first_token_at: float, index: int) -> float:
        """Returns when output token ``index`` is due (the first one at the prefill's end)."""
        due = first_token_at + index / self.config.decode_tokens_per_s
        stall_after = self.config.stall_after_chunks
        if stall_after is not None and index >= stall_after:
            due += self.config.stall_ms / 1000
        return due

    async def _sse_events(self, scheduled: _ScheduledAnswer) -> AsyncIterator[bytes]:
        envelope = self._envelope(scheduled, "chat.completion.chunk")
        if scheduled.request.include_usage:
            envelope["usage"] = None  # OpenAI sends the key in every chunk once usage is asked

        def chunk(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**envelope, "choices": [choice]}

        await self._prefill(scheduled)
        loop = asyncio.get_running_loop()
        # Events already due go out in one write: under load the server falls behind its
        # schedule, and one send per token would put it further behind.
        due_events: list[bytes] = []
        for index, delta in enumerate(scheduled.answer.deltas()):
            due = self._output_time(scheduled.first_token_at, index)
            if due > loop.time() and due_events:
                yield b"".join(due_events)
                due_events.clear()
            await self.sleeper.until(due)
            if index == self.config.reset_after_chunks:
                yield b"".join(due_events)
                raise _ConnectionDropped
            due_events.append(_sse(chunk(delta, None)))
        # As llama.cpp does, the last chunk carries the timings: the usage chunk when usage is
        # asked for, else the one with the finish reason.
        last = chunk({}, scheduled.answer.finish_reason)
        if scheduled.request.include_usage:
            due_events.append(_sse(last))
            last = {**envelope, "choices": [], "usage": self._usage(scheduled)}
        due_events.append(_sse({**last, **self._timings(scheduled)}))
        due_events.append(b"data: [DONE]\n\n")
        yield b"".join(due_events)

    def _usage(self, scheduled: _ScheduledAnswer) -> dict[str, Any]:
        usage = scheduled.usage()
        if self.config.usage_format == "deepseek":  # beside OpenAI's cached_tokens, as DeepSeek
            usage["prompt_cache_hit_tokens"] = scheduled.cached_tokens
            usage["prompt_cache_miss_tokens"] = scheduled.prompt_tokens - scheduled.cached_tokens
        return usage

    def _timings(self, scheduled: _ScheduledAnswer) -> dict[str, Any]:
        """The ``timings`` field where the server sends llama.cpp's, else nothing."""
        return {"timings": scheduled.timings()} if self.config.timings else {}

    @staticmethod
    async def _held_until_end(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        yield b"".join([event async for event in events])

    def _envelope(self, scheduled: _ScheduledAnswer, kind: str) -> dict[str, Any]:
        return {
            "id": scheduled.completion_id,
            "object": kind,
            "created": scheduled.created,
            "model": scheduled.request.model,
            "system_fingerprint": _SYSTEM_FINGERPRINT,
        }

    def _model_json(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": _OWNER}

    async def _list_models(self, request: Request) -> Response:
        authenticate(request, self.config.api_key)
        models = [self._model_json(name) for name in self.config.models]
        return JSONResponse({"object": "list", "data": models})

    async def _retrieve_model(self, request: Request) -> Response:
        authenticate(request, self.config.api_key)
        name = request.path_params["model"]
        check_model(name, self.config.models)
        return JSONResponse(self._model_json(name))

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _props(self, request: Request) -> Response:
        # The fields of llama-server's GET /props that doctor reads: its slots, each slot's
        # context, its build, whether its chat template renders tools (the simulator counts them).
        settings = (
            {} if self.config.context_window is None else {"n_ctx": self.config.context_window}
        )
        return JSONResponse(
            {
                "total_slots": self.config.cache_slots,
                "default_generation_settings": settings,
                "build_info": "agent-latency-sim",
                "chat_template_caps": {"supports_tools": True},
            }
        )

    async def _request_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        return exc.response()

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            error = RequestError(
                404,
                f"Unknown request URL: {request.method} {request.url.path}. This server speaks "
                "the OpenAI API: POST /v1/chat/completions, GET /v1/models.",
                code="unknown_url",
            )
        else:
            error = RequestError(
                exc.status_code,
                f"{request.method} {request.url.path}: {exc.detail}.",
                code="method_not_allowed" if exc.status_code == 405 else None,
                headers=exc.headers,
            )
        return error.response()

    async def _server_error(self, request: Request, exc: Exception) -> Response:
        return RequestError(
            500, "The simulator failed unexpectedly; see its log.", error_type="server_error"
        ).response()


def create_app(config: SimulatorConfig | None = None) -> Starlette:
    """Returns the ASGI app of a simulated OpenAI-compatible model server.

    Args:
        config: How the server behaves; ``None`` uses the defaults.
    """
    return Simulator(config or SimulatorConfig()).app
