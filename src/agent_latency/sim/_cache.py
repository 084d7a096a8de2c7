"""The simulator's prefix cache: token blocks, a capacity in tokens, LRU eviction, idle expiry.

It works like vLLM's automatic prefix caching. A prompt is cut into blocks of
``block_tokens`` tokens; a block is known by the whole prefix that ends with it, so a cached
block is only ever reused after the same tokens. A new prompt reuses its longest run of cached
leading blocks: whole blocks only, and never its last token (the model needs that token's
logits, so at least one token is always prefilled). The cache holds ``capacity_tokens`` worth
of blocks shared by every conversation; when full, the least recently used blocks go first,
and of one prompt its tail before its head, so what stays is still a usable prefix. A block
idle for longer than ``lifetime_s`` expires.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from ._prompt import token_count

_KEY_BYTES = 16


class PrefixCache:
    """Finds how much of a prompt is cached, and caches prefilled prompts.

    Not thread-safe: the simulator uses it from its event loop only.

    Args:
        capacity_tokens: How many tokens the cache holds, in whole blocks.
        block_tokens: The size of a block; 1 caches any shared prefix, token by token.
        lifetime_s: Idle time after which a block expires; ``None``: blocks never expire.
        clock: The time source, in seconds.
    """

    def __init__(
        self,
        *,
        capacity_tokens: int,
        block_tokens: int,
        lifetime_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._block_tokens = block_tokens
        self._capacity_blocks = capacity_tokens // block_tokens
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
        return hits * self._block_tokens

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
