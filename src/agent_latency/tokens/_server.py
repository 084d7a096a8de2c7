"""Counting in the endpoint's own tokens, through its tokenize route (found on first use):

- llama.cpp's server and vLLM: ``POST /tokenize`` at the server's root; one body serves both
  (each ignores the other's fields), and both answer ``{"tokens": [...]}``.
- llama-cpp-python's server: ``POST /extras/tokenize`` with ``{"input": ...}``; the BOS token it
  always adds is taken off again (the framing counts it once per request).

Results are cached per text, so a conversation counted again costs no request. The API key is
sent as a bearer token and never appears in a message or a repr.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Sequence
from typing import Any

import httpx

from agent_latency._caches import LRUCache
from agent_latency._redaction import display_url
from agent_latency._validation import is_integer

_TEXT_CACHE_ENTRIES = 65_536
_TEXT_CACHE_BYTES = 64 * 1024 * 1024
_MISSING = (404, 405, 501)
_IDS = "I"  # token ids are packed as 4-byte unsigned integers: a tenth of a tuple of ints
_MAX_ID = 2**32 - 1
_SHOWN_CHARS = 40


class ServerVocabulary:
    """The vocabulary of a running server, reached over HTTP.

    Args:
        base_url: The OpenAI-compatible endpoint (``http://host:port/v1``); the tokenize route
            is looked up at the server's root.
        api_key: Sent as ``Authorization: Bearer``; never shown.
        model: The model name, sent where the route takes one (vLLM).
        timeout_s: Per-request timeout.
    """

    def __init__(
        self, base_url: str, *, api_key: str | None, model: str, timeout_s: float = 10.0
    ) -> None:
        root = base_url.rstrip("/")
        self._root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.name = f"server {display_url(self._root)}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s)
        self._model = model
        self._route: str | None = None
        self._bos = array(_IDS)
        self._lock = threading.Lock()
        self._texts = LRUCache(_TEXT_CACHE_ENTRIES, _TEXT_CACHE_BYTES)

    def __repr__(self) -> str:
        return f"ServerVocabulary({self.name!r})"

    def encode(self, text: str) -> list[int]:
        return self._cached(text).tolist()

    def count(self, text: str) -> int:
        return len(self._cached(text))

    def _cached(self, text: str) -> array[int]:
        tokens: array[int] | None = self._texts.get(text)
        if tokens is None:
            tokens = self._tokens(self._ensure_route(), text)
            if self._bos and tokens[: len(self._bos)] == self._bos:
                del tokens[: len(self._bos)]
            self._texts.put(text, tokens, sys.getsizeof(text) + tokens.itemsize * len(tokens))
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        route = self._ensure_route()
        if route == "/extras/tokenize":
            answer = self._post("/extras/detokenize", {"tokens": list(tokens)})
            return str(answer.get("text", ""))
        answer = self._post("/detokenize", {"tokens": list(tokens), "model": self._model})
        # llama.cpp answers "content", vLLM "prompt".
        return str(answer.get("content", answer.get("prompt", "")))

    def special_id(self, token: str) -> int | None:
        return None  # framing tokens get ids of their own; each counts as one token

    def _ensure_route(self) -> str:
        with self._lock:
            if self._route is None:
                for route in ("/tokenize", "/extras/tokenize"):
                    try:
                        bos = self._tokens(route, "")
                    except _RouteMissingError:
                        continue
                    self._route, self._bos = route, bos
                    break
                else:
                    raise ValueError(
                        f"tokenizer 'server': {display_url(self._root)} has no tokenize route "
                        "(POST /tokenize of llama.cpp and vLLM, POST /extras/tokenize of "
                        "llama-cpp-python: not found). Fix: set llm.tokenizer to a tokenizer "
                        "name (e.g. 'qwen', 'cl100k') or the path of the model's tokenizer.json."
                    )
            return self._route

    def _tokens(self, route: str, text: str) -> array[int]:
        if route == "/tokenize":
            body: dict[str, Any] = {
                "content": text,
                "add_special": False,
                "parse_special": True,
                "prompt": text,
                "model": self._model,
                "add_special_tokens": False,
            }
        else:
            body = {"input": text, "model": self._model}
        tokens = self._post(route, body).get("tokens")
        if not isinstance(tokens, list):
            raise self._bad_answer(route, "without a 'tokens' list")
        ids = array(_IDS)
        for index, token in enumerate(tokens):
            # llama.cpp with pieces answers [{"id": ..., "piece": ...}].
            token_id = token.get("id") if isinstance(token, dict) else token
            if not is_integer(token_id) or not 0 <= token_id <= _MAX_ID:
                shown = repr(token)
                if len(shown) > _SHOWN_CHARS:
                    shown = shown[:_SHOWN_CHARS] + "..."
                raise self._bad_answer(
                    route,
                    f"tokens[{index}] = {shown}, which is not a token id (an integer from 0 to "
                    f"{_MAX_ID}, or an object with one as 'id')",
                )
            ids.append(token_id)
        return ids

    def _bad_answer(self, route: str, what: str) -> ValueError:
        return ValueError(
            f"tokenizer 'server': POST {route} of {display_url(self._root)} answered {what}. "
            "Fix: point llm.base_url at a llama.cpp, vLLM or llama-cpp-python server, or "
            "choose an offline tokenizer."
        )

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        where = f"POST {route} of {display_url(self._root)}"
        try:
            response = self._client.post(self._root + route, json=body)
        except httpx.HTTPError as exc:  # the text may hold the URL with its credentials
            raise ValueError(
                f"tokenizer 'server': {where} failed ({type(exc).__name__}). "
                "Fix: start the server or choose an offline tokenizer."
            ) from None
        if response.status_code in _MISSING:
            raise _RouteMissingError(route)
        if response.status_code != 200:
            raise ValueError(
                f"tokenizer 'server': {where} answered HTTP {response.status_code}. "
                "Fix: check llm.api_key and the server's log, or choose an offline tokenizer."
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) else {}


class _RouteMissingError(Exception):
    """The server has no such route."""
