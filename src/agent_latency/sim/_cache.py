"""The simulator's prefix cache: how much of a prompt a server can skip prefilling.

Two kinds, as real servers have them (:func:`prefix_cache_for` picks by the configuration):

:class:`PrefixCache` works like vLLM's automatic prefix caching, and with its options like a
hosted API's. A prompt is cut into blocks of ``block_tokens`` tokens; a block is known by the
whole prefix that ends with it, so a cached block is only ever reused after the same tokens. A
new prompt reuses its longest run of cached leading blocks: whole blocks only, never its last
token (the model needs that token's logits, so at least one token is always prefilled), and
nothing when that run is shorter than ``min_tokens`` (OpenAI caches from 1,024 tokens, in
128-token steps). The cache holds ``capacity_tokens`` worth of blocks shared by every
conversation; when full, the least recently used blocks go first, and of one prompt its tail
before its head, so what stays is still a usable prefix. A block idle for longer than
``lifetime_s`` expires.

:class:`SlotCache` works like llama.cpp's server: ``slots`` slots, each holding the last prompt
it served. A prompt goes to the idle slot whose prompt shares the largest part of it (at least
``similarity`` of its tokens, llama-server's ``--slot-prompt-similarity``), else to the least
recently used slot, whose prompt it then replaces; it reuses the prefix it shares with that
slot's prompt, token by token, never its last token. More conversations than slots evict each
other.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Protocol

from ._config import SimulatorConfig
from ._prompt import token_count

_KEY_BYTES = 16
SLOT_PROMPT_SIMILARITY = 0.1
"""llama-server's default ``--slot-prompt-similarity``."""


class ServerCache(Protocol):
    """What the simulator asks of its prefix cache (not thread-safe: one event loop uses it)."""

    def reusable_tokens(self, tokens: bytes) -> int:
        """Returns how many leading tokens of a packed prompt need no prefill."""

    def remember(self, tokens: bytes) -> None:
        """Keeps a prefilled prompt for later requests."""


def prefix_cache_for(config: SimulatorConfig) -> ServerCache:
    """Returns the prefix cache ``config`` asks for: per-slot with ``cache_slots``, else blocks."""
    if config.cache_slots is not None:
        return SlotCache(slots=config.cache_slots, lifetime_s=config.cache_lifetime_s)
    return PrefixCache(
        capacity_tokens=config.cache_tokens,
        block_tokens=config.cache_block_tokens,
        min_tokens=config.cache_min_tokens,
        lifetime_s=config.cache_lifetime_s,
    )


class PrefixCache:
    """Finds how much of a prompt is cached in whole blocks, and caches prefilled prompts.

    Args:
        capacity_tokens: How many tokens the cache holds, in whole blocks.
        block_tokens: The size of a block; 1 caches any shared prefix, token by token.
        min_tokens: A cached run shorter than this is not reused (0: any whole block).
        lifetime_s: Idle time after which a block expires; ``None``: blocks never expire.
        clock: The time source, in seconds.
    """

    def __init__(
        self,
        *,
        capacity_tokens: int,
        block_tokens: int,
        min_tokens: int = 0,
        lifetime_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._block_tokens = block_tokens
        self._capacity_blocks = capacity_tokens // block_tokens
        self._min_tokens = min_tokens
        self._lifetime_s = lifetime_s
        self._clock = clock
        # Key of each cached block -> when it was last used, the least recently used first.
        self._blocks: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        """Returns the number of tokens cached."""
        return len(self._blocks) * self._block_tokens

    def reusable_tokens(self, tokens: bytes) -> int:
        """Returns how many leading tokens of a packed prompt need no prefill."""
        self._expire()
        usable_blocks = (token_count(tokens) - 1) // self._block_tokens
        hits = 0
        for key in self._keys(tokens, usable_blocks):
            if key not in self._blocks:
                break
            hits += 1
        reused = hits * self._block_tokens
        return reused if reused >= self._min_tokens else 0

    def remember(self, tokens: bytes) -> None:
        """Caches the whole blocks of a prefilled prompt, evicting the least recently used."""
        now = self._clock()
        keys = list(self._keys(tokens, token_count(tokens) // self._block_tokens))
        # The head is marked the most recent: under pressure a prompt loses its tail first.
        for key in reversed(keys):
            self._blocks[key] = now
            self._blocks.move_to_end(key)
        while len(self._blocks) > self._capacity_blocks:
            self._blocks.popitem(last=False)

    def _keys(self, tokens: bytes, blocks: int) -> Iterator[bytes]:
        """Yields the key of each of the first ``blocks`` blocks: a digest of its whole prefix."""
        if blocks <= 0:
            return
        block_bytes = len(tokens) // token_count(tokens) * self._block_tokens
        prefix = hashlib.blake2b(digest_size=_KEY_BYTES)
        for start in range(0, blocks * block_bytes, block_bytes):
            prefix.update(tokens[start : start + block_bytes])
            yield prefix.copy().digest()

    def _expire(self) -> None:
        if self._lifetime_s is None:
            return
        oldest_kept = self._clock() - self._lifetime_s
        while self._blocks and next(iter(self._blocks.values())) < oldest_kept:
            self._blocks.popitem(last=False)


def _shared_tokens(left: bytes, right: bytes) -> int:
    """Returns how many leading tokens two packed sequences share (a binary search of equal
    prefixes: each comparison runs in C)."""
    width = len(left) // token_count(left) if left else 1
    low, high = 0, min(len(left), len(right)) // width
    while low < high:
        middle = (low + high + 1) // 2
        if left[: middle * width] == right[: middle * width]:
            low = middle
        else:
            high = middle - 1
    return low


class SlotCache:
    """llama.cpp's per-slot prompt cache: each slot holds the last prompt it served.

    Args:
        slots: How many slots (llama-server's ``--parallel``).
        similarity: The share of a prompt a slot's prompt must share to be chosen over the
            least recently used slot.
        lifetime_s: Idle time after which a slot's prompt is forgotten; ``None``: never.
        clock: The time source, in seconds.
    """

    def __init__(
        self,
        *,
        slots: int,
        similarity: float = SLOT_PROMPT_SIMILARITY,
        lifetime_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._similarity = similarity
        self._lifetime_s = lifetime_s
        self._clock = clock
        # Per slot: its prompt and when it was last used; never used slots first.
        self._slots: list[tuple[bytes, float]] = [(b"", -float("inf")) for _ in range(slots)]

    def reusable_tokens(self, tokens: bytes) -> int:
        """Returns how many leading tokens of a packed prompt the chosen slot spares."""
        slot = self._choose(tokens)
        shared = _shared_tokens(self._slots[slot][0], tokens)
        return max(0, min(shared, token_count(tokens) - 1))

    def remember(self, tokens: bytes) -> None:
        """Puts a prefilled prompt in the slot it was served from."""
        self._slots[self._choose(tokens)] = (tokens, self._clock())

    def _choose(self, tokens: bytes) -> int:
        """The slot a prompt goes to: the most similar one above the threshold, else the LRU."""
        self._expire()
        length = token_count(tokens)
        best, best_share = None, self._similarity
        for index, (cached, _used) in enumerate(self._slots):
            share = _shared_tokens(cached, tokens) / length if cached and length else 0.0
            if share > best_share:
                best, best_share = index, share
        if best is not None:
            return best
        return min(range(len(self._slots)), key=lambda index: self._slots[index][1])

    def _expire(self) -> None:
        if self._lifetime_s is None:
            return
        oldest_kept = self._clock() - self._lifetime_s
        self._slots = [
            (cached, used) if used >= oldest_kept else (b"", used) for cached, used in self._slots
        ]
