"""The channel's URL and key: refused at load when no request could carry them safely. Every
message names where the value came from and shows the URL only through :func:`display_url`,
never the key."""

from __future__ import annotations

import logging
import re
from typing import Final
from urllib.parse import urlsplit

from agent_latency._redaction import display_url, redact
from agent_latency.config._sources import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_OPENAI_API_KEY,
    ENV_PLACE,
    ConfigError,
)

logger = logging.getLogger("agent_latency.config")

_PLACEHOLDER: Final = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)\}|(?P<bare>[A-Za-z_]\w*))")
"""A shell-style ``${VARIABLE}`` or ``$VARIABLE``, which no file format here expands."""


def checked_key(key: str, place: str) -> str:
    """Returns the API key without surrounding whitespace (a key mounted from a file often ends
    in a newline), refusing one no HTTP header can carry, a placeholder, one that starts with its
    auth scheme (``Bearer ``) and a URL (the channel's two fields swapped)."""
    stripped = key.strip()
    if not stripped:
        raise ConfigError(f"{place}: must not be empty. Fix: write the key, or leave it out.")
    if stripped != key:
        logger.warning("%s: removed whitespace around the API key (e.g. a final newline)", place)
    placeholder = _PLACEHOLDER.fullmatch(stripped)
    if placeholder is not None:
        variable = placeholder["braced"] or placeholder["bare"]
        if place.startswith(ENV_PLACE):
            raise _unexpanded_in_environment(
                place, f"${{{variable}}}", "the server would refuse it (401)"
            )
        copy = (
            ""
            if variable in (ENV_OPENAI_API_KEY, ENV_API_KEY)
            else f' (e.g. export {ENV_API_KEY}="${variable}")'
        )
        raise ConfigError(
            f"{place}: holds the placeholder ${{{variable}}}, not a key: TOML and JSON do not "
            "expand environment variables, so the server would refuse it (401). Fix: remove the "
            f"key from the file and set it in the environment: {ENV_OPENAI_API_KEY} (read when no "
            f"file sets a key) or {ENV_API_KEY} (wins over the files){copy}."
        )
    if not (stripped.isascii() and stripped.isprintable()):
        raise ConfigError(
            f"{place}: the API key holds a character that is not printable ASCII, which an HTTP "
            "header cannot carry. Fix: copy the key again from the provider's console."
        )
    scheme, space, _ = stripped.partition(" ")
    if space and scheme.lower() in _AUTH_SCHEMES:
        raise ConfigError(
            f"{place}: the API key starts with {scheme + ' '!r}, which the client adds itself: "
            f"the server would get {scheme + ' ' + scheme!r} and refuse it (401). Fix: write the "
            f"key alone, without {scheme + ' '!r}."
        )
    if is_http_url(stripped):
        raise ConfigError(
            f"{place}: holds a URL, not a key: llm.api_key and llm.base_url look swapped. Fix: "
            "put the API root in llm.base_url and the key in llm.api_key."
        )
    return stripped


_AUTH_SCHEMES: Final = frozenset({"bearer", "basic"})
"""HTTP auth schemes a key copied from a header or a curl command may still start with."""


def refuse_placeholder(value: str, place: str, variable: str) -> None:
    """Refuses a value that is a shell-style ``${VARIABLE}``, naming the variable that sets it.

    Args:
        value: The value, as configured.
        place: Where it was configured, e.g. ``"config.toml: llm.base_url"``.
        variable: The environment variable that sets it, e.g. ``AGENT_LATENCY_BASE_URL``.
    """
    placeholder = _PLACEHOLDER.fullmatch(value.strip())
    if placeholder is not None and place.startswith(ENV_PLACE):
        raise _unexpanded_in_environment(place, repr(value.strip()), "it would be sent as it is")
    if placeholder is not None:
        raise ConfigError(
            f"{place}: holds the placeholder {value.strip()!r}, which nothing here expands "
            "(TOML and JSON have no environment variables), so it would be used as written. "
            f"Fix: write the value itself, or set {variable} in the environment (it wins over "
            "the files)."
        )


def _unexpanded_in_environment(place: str, shown: str, harm: str) -> ConfigError:
    """The error for a placeholder an environment variable holds as its value."""
    return ConfigError(
        f"{place}: holds the placeholder {shown}, which was not expanded where the environment "
        "was set (an env file read by docker run --env-file or systemd's EnvironmentFile= is "
        f"taken as written), so {harm}. Fix: write the value itself where the variable is set."
    )


def is_http_url(url: object) -> bool:
    """Whether ``url`` is an absolute http(s) URL with a host and a valid port, if any."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError when out of range or not a number
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False


def check_base_url(base_url: str, place: str) -> None:
    """Refuses a base_url that is not an http(s) URL, or that carries a user name or password,
    a query or fragment, whitespace or a control character, or a ``${VARIABLE}`` placeholder.

    Args:
        base_url: The URL, as configured.
        place: Where it was configured, for the message (e.g. ``"config.toml: llm.base_url"``).

    Raises:
        ConfigError: Naming ``place`` and showing the URL without its credentials.
    """
    refuse_placeholder(base_url, place, ENV_BASE_URL)
    _refuse_whitespace(base_url, place)
    try:
        parts = urlsplit(base_url)
    except ValueError:  # an unclosed IPv6 bracket: not an http(s) URL, below
        parts = None
    try:
        _ = parts and parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        raise ConfigError(
            f"{place}: the URL's port is not a number from 0 to 65535. Fix: write the port the "
            "server listens on, e.g. http://127.0.0.1:8000/v1."
        ) from None
    if parts is None or not is_http_url(base_url):
        # Without a dot or a colon it names no host: maybe the key, pasted in the wrong field.
        shown = (
            repr(redact(display_url(base_url)))
            if "." in base_url or ":" in base_url
            else "the value (not shown: it may be a key)"
        )
        raise ConfigError(
            f"{place}: {shown} is not an http(s) URL. "
            "Fix: write the API root, e.g. https://api.example.com/v1."
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{place}: {display_url(base_url)!r} has a user name or password before its host; "
            "they would be sent as Basic auth instead of the API key, and shown wherever the "
            "URL is. Fix: remove 'user:password@' from the URL and set llm.api_key or "
            f"{ENV_API_KEY}."
        )
    if "?" in base_url or "#" in base_url:
        raise ConfigError(
            f"{place}: {display_url(base_url)!r} goes on with a query string or fragment ('?...' "
            "or '#...'); the client appends each request's path after it, so every request would "
            "go to a wrong URL, and a key in it would be shown wherever the URL is. Fix: end the "
            "URL at the API root's path, and set the key in llm.api_key or "
            f"{ENV_API_KEY}."
        )


def _refuse_whitespace(base_url: str, place: str) -> None:
    """Refuses a URL holding a space or a control character: httpx refuses a control character
    deep in the first request, and a space makes every request go to a wrong URL."""
    odd = next((char for char in base_url if char.isspace() or not char.isprintable()), None)
    if odd is not None:
        where = "at an end" if base_url.strip() != base_url else "inside"
        raise ConfigError(
            f"{place}: {redact(display_url(base_url.strip()))!r} holds {odd!r} ({where}), which "
            "no request URL may carry. Fix: remove it (a '\\r' or '\\n' at the end often comes "
            "from a file saved on Windows or a copied line)."
        )


_API_SEGMENTS: Final = frozenset({"api", "openai", "compatible-mode", "inference", "llm"})


def base_url_warnings(base_url: str | None, place: str) -> list[str]:
    """Flags a base_url that looks like a website home page rather than an API root."""
    if base_url is None:
        return []
    last = urlsplit(base_url).path.rstrip("/").rsplit("/", 1)[-1].lower()
    is_version = last[:1] == "v" and last[1:2].isdigit()
    if is_version or last in _API_SEGMENTS:
        return []
    return [
        f"{place}: {display_url(base_url)!r} looks like a website rather than an API root (its "
        "path does not end in an API segment such as /v1 or /api). Requests will likely get 404 "
        "or an HTML page. Fix: use the API base URL from the provider's docs, e.g. "
        "https://host/v1."
    ]


_OPENAI_HOST: Final = "api.openai.com"


def output_limit_field(chosen: str, base_url: str | None) -> str:
    """Returns the request field that carries the output limit for this endpoint.

    OpenAI takes ``max_completion_tokens`` (and rejects ``max_tokens`` for reasoning models);
    other OpenAI-compatible servers take ``max_tokens``, and some (llama-cpp-python's server)
    silently ignore ``max_completion_tokens``, so an unbounded answer blocks the server.

    Args:
        chosen: ``llm.max_tokens_param``: a field name, or ``"auto"`` to choose by the host.
        base_url: The endpoint; ``None`` is OpenAI's.
    """
    if chosen != "auto":
        return chosen
    is_openai = base_url is None or urlsplit(base_url).hostname == _OPENAI_HOST
    return "max_completion_tokens" if is_openai else "max_tokens"
