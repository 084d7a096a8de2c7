"""Keeping secrets out of what agent-latency prints, logs and reports."""

from __future__ import annotations

import functools
import re
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

_KEY_LIKE: Final = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_\-*]{4,}")
# An HTTP credential as a header value or a header line, e.g. in httpx's
# "Illegal header value b'Bearer sk-...\n'" or a proxy echoing "Authorization: ...".
_HEADER_LIKE: Final = re.compile(
    r"(?i)\b(authorization|proxy-authorization|api-key|x-api-key)(\s*[:=]\s*)"
    r"(?:(?:bearer|basic)\s+)?[^\s'\",]+"
    r"|\bbearer\s+[^\s'\",]{8,}"  # alone, a credential is long: "bearer of news" is prose
)
# "user:password@" before a host, with or without a scheme ("user:pw@host/v1" has none).
_USERINFO: Final = re.compile(r"^([^/?#]*//)?[^/?#@]*@")
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


@functools.lru_cache(maxsize=64)
def host_and_port(url: str) -> tuple[str, int] | None:
    """Returns the host and port an endpoint URL names (credentials never included).

    A URL without a scheme is read as a host; a missing port is the scheme's (443 without one).
    ``None`` when there is no host or the URL cannot be parsed.
    """
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host = parts.hostname
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    except ValueError:
        return None
    return (host, port) if host else None


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
    shown = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return _USERINFO.sub(r"\1", shown)  # a URL without "//" keeps "user:pw@" in its path


def url_secrets(url: str) -> tuple[str, ...]:
    """Returns the parts of ``url`` that may hold credentials, as they may be quoted in messages.

    The user info and the query, whole, the password and each query value of 4 characters or
    more (a shorter one would mask every such word of a message), and the fragment, as written
    and percent-decoded; the longest first, so masking them in that order leaves no piece of one
    behind.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return (url,)  # unparsable: the whole URL is the secret
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    values = [password or "", *(value for _, value in parse_qsl(parts.query))]
    found = {userinfo, parts.query, parts.fragment, *(v for v in values if len(v) >= 4)}
    found |= {unquote(piece) for piece in found}
    return tuple(sorted((piece for piece in found if piece), key=len, reverse=True))


def redact(text: str, secret: str | None = None) -> str:
    """Returns ``text`` with ``secret``, header credentials and API-key-shaped words masked.

    Servers echo parts of a rejected key in their error messages (OpenAI does), and HTTP
    libraries quote the offending header in theirs (httpx's ``Illegal header value``); those
    messages are shown to the user only through this.
    """
    if secret:
        for form in {secret, secret.strip(), repr(secret)[1:-1]}:
            if form:
                text = text.replace(form, "***")
    text = _HEADER_LIKE.sub(_mask_header, text)
    return _KEY_LIKE.sub("***", text)


def _mask_header(match: re.Match[str]) -> str:
    name, separator = match.group(1, 2)
    return f"{name}{separator}***" if name else "Bearer ***"
