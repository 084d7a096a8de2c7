"""Keeping secrets out of what agent-latency prints, logs and reports."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

_KEY_LIKE: Final = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_\-*]{4,}")


def display_url(url: str) -> str:
    """Returns ``url`` without user info, query or fragment, where credentials hide."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # an unparsable URL is shown by its scheme only
        return f"{url.partition(':')[0]}:<unparsable URL>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact(text: str, secret: str | None = None) -> str:
    """Returns ``text`` with ``secret`` and anything shaped like an API key masked.

    Servers echo parts of a rejected key in their error messages (OpenAI does); those messages
    are shown to the user only through this.
    """
    if secret:
        text = text.replace(secret, "***")
    return _KEY_LIKE.sub("***", text)
