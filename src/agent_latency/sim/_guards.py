"""What a chat request must pass before it is answered: its key, its body, its model, bad luck.

Each check raises :class:`~agent_latency.sim._protocol.RequestError` with the status and body
OpenAI answers with; a client that disconnects while sending its body raises
:class:`ClientGone`, which gets no answer at all.
"""

from __future__ import annotations

import hmac
import json
import math
import random
from typing import NoReturn

from starlette.requests import ClientDisconnect, Request

from ._config import SimulatorConfig
from ._protocol import RequestError


class ClientGone(Exception):
    """The client disconnected before its request was complete: there is no one to answer."""


def authenticate(request: Request, api_key: str | None) -> None:
    """Checks the ``Authorization: Bearer`` header when the server has a key."""
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise RequestError(
            401,
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        )
    if not hmac.compare_digest(given.strip().encode(), api_key.encode()):
        raise RequestError(401, "Incorrect API key provided.", code="invalid_api_key")


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


async def read_json(request: Request, limit: int) -> object:
    """Returns the decoded JSON body, read up to ``limit`` bytes.

    Raises:
        RequestError: 415 for another content type, 413 past the limit, 400 for a body that is
            not strict JSON (``NaN`` and ``Infinity`` included, as OpenAI refuses them).
        ClientGone: When the client disconnects before the body is complete.
    """
    content_type = request.headers.get("content-type", "")
    if content_type.partition(";")[0].strip().lower() != "application/json":
        raise RequestError(
            415,
            f"Unsupported content type {content_type or '(none)'!r}: send the body as JSON "
            "with 'Content-Type: application/json'.",
            code="unsupported_media_type",
        )
    too_large = RequestError(
        413,
        f"The request body is larger than this server accepts ({limit} bytes).",
        code="request_too_large",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    try:
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise too_large
    except ClientDisconnect:
        raise ClientGone from None
    try:
        return json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise RequestError(
            400,
            "We could not parse the JSON body of your request. The body must be valid JSON "
            "(UTF-8) holding one object.",
        ) from None


def check_model(model: str, served: tuple[str, ...]) -> None:
    """Refuses a model the server does not serve with OpenAI's 404."""
    if model not in served:
        raise RequestError(
            404,
            f"The model {model!r} does not exist or you do not have access to it. This "
            f"server serves: {', '.join(served)}.",
            param="model",
            code="model_not_found",
        )


def check_context_window(prompt_tokens: int, max_tokens: int | None, window: int | None) -> None:
    """Refuses a request too long for the model's context window, in OpenAI's words."""
    if window is None or prompt_tokens + (max_tokens or 0) <= window:
        return
    if max_tokens is None:
        asked = f"your messages resulted in {prompt_tokens} tokens"
        fix = "Please reduce the length of the messages."
    else:
        asked = (
            f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens} in the completion)"
        )
        fix = "Please reduce the length of the messages or completion."
    raise RequestError(
        400,
        f"This model's maximum context length is {window} tokens. However, {asked}. {fix}",
        param="messages",
        code="context_length_exceeded",
    )


def inject_fault(config: SimulatorConfig, draw: random.Random) -> None:
    """Fails the request with a 429 or a 500 at the configured rates."""
    if not (config.rate_limit_rate or config.error_rate):
        return
    value = draw.random()
    if value < config.rate_limit_rate:
        retry_after = config.retry_after_s
        raise RequestError(
            429,
            f"Rate limit reached for requests. Please try again in {retry_after:g}s.",
            code="rate_limit_exceeded",
            error_type="requests",
            headers={
                "retry-after": str(math.ceil(retry_after)),  # whole seconds, never too early
                "retry-after-ms": str(round(retry_after * 1000)),
            },
        )
    if value < config.rate_limit_rate + config.error_rate:
        raise RequestError(
            500,
            "The server had an error while processing your request. Sorry about that!",
            error_type="server_error",
        )
