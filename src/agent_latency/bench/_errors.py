"""How the bench explains a failed call: the endpoint as a whole, or one request it refused.

One rule for the single-turn bench, the replay and the mixed workload: HTTP 400, 413 and 422
refuse one request (too long, invalid), which fails only what sent it; anything else (unreachable,
key refused, unknown model) fails the endpoint, and the bench stops. The server's message is kept
whole, on one line, without the API key.
"""

from __future__ import annotations

from typing import Final

import openai

from agent_latency._redaction import display_url, redact
from agent_latency.config import Settings


class EndpointError(ValueError):
    """The endpoint failed a request; the message names it and the likely fix, never the key."""


class RequestRefused(EndpointError):
    """One request was refused (by the endpoint, or before sending as too long for the context
    window): what sent it fails, and the bench goes on with the rest.

    Attributes:
        server_message: The server's own message (one line, the key removed); ``None`` when the
            request was refused before sending.
    """

    def __init__(self, message: str, *, server_message: str | None = None) -> None:
        super().__init__(message)
        self.server_message = server_message


REFUSED_STATUSES: Final = frozenset({400, 413, 422})
"""Statuses that refuse one request (too long, invalid), not the endpoint as a whole."""
_STATUS_HINTS: Final = {
    400: "the server rejected the request; check the model's context window and the budget",
    401: "check the API key (--api-key, llm.api_key or AGENT_LATENCY_API_KEY)",
    403: "check that the API key may use this model",
    404: "base_url must be the API root (e.g. https://host/v1) and the model must exist there",
    429: "the endpoint is rate limiting; run fewer --runs or wait",
}


def explain_api_error(error: openai.APIError, settings: Settings) -> EndpointError:
    """Explains a failed call: a :class:`RequestRefused` for a refused request, else an
    :class:`EndpointError`; the server's message whole, on one line, without the key."""
    key = settings.llm.api_key
    message = " ".join(str(getattr(error, "message", "") or "").split())
    message = redact(message, key.get_secret_value() if key is not None else None)
    where = f"{display_url(settings.llm.base_url or '')} (model {settings.llm.model!r})"
    if isinstance(error, openai.APIStatusError):
        hint = _STATUS_HINTS.get(error.status_code, "check the endpoint's logs")
        text = f"{where} answered HTTP {error.status_code}: {message} Fix: {hint}."
        if error.status_code in REFUSED_STATUSES:
            return RequestRefused(text, server_message=message)
        return EndpointError(text)
    if isinstance(error, openai.APITimeoutError):
        return EndpointError(
            f"{where} did not answer within llm.timeout_seconds = "
            f"{settings.llm.timeout_seconds:g} s. Fix: check that the server is not overloaded, "
            "or raise llm.timeout_seconds in config.toml."
        )
    return EndpointError(
        f"{where} could not be reached ({type(error).__name__}). Fix: check that the server "
        "is running and that base_url is its API root, e.g. http://127.0.0.1:8000/v1."
    )


_DETAIL_CHARS: Final = 160
"""The most of the client's complaint shown: it may quote a whole web page."""


def explain_unreadable_answer(error: ValueError, settings: Settings) -> EndpointError:
    """Explains a call whose answer the client could not read as a chat completion (a web page,
    an empty stream, a body of another API): the endpoint is not what base_url should name."""
    key = settings.llm.api_key
    detail = " ".join(str(error).split())
    if len(detail) > _DETAIL_CHARS:
        detail = detail[:_DETAIL_CHARS] + "..."
    detail = redact(detail, key.get_secret_value() if key is not None else None)
    where = f"{display_url(settings.llm.base_url or '')} (model {settings.llm.model!r})"
    return EndpointError(
        f"{where} answered something other than an OpenAI chat completion ({detail}). Fix: "
        "base_url must be the API root of an OpenAI-compatible server (e.g. https://host/v1), "
        "not a website; `agent-latency doctor` checks it."
    )
